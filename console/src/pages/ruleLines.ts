// Finds the YAML line an API rule problem talks about: problems read "<source>: <path>: <reason>", where
// path is like `severity`, `conditions[1].op` or `<root>`.

export interface LineProblem { line: number | null; message: string }

function indentOf(line: string): number { return line.length - line.trimStart().length; }

/** 1-based line of `path` in `text`, or null when it cannot be found (then the message is shown above the editor). */
export function lineOf(text: string, path: string): number | null {
  const lines = text.split("\n");
  const segments = path.split(".").flatMap((s) => {
    const m = /^([^[\]]+)((?:\[\d+\])*)$/.exec(s);
    if (!m) return [s];
    return [m[1], ...[...m[2].matchAll(/\[(\d+)\]/g)].map((x) => Number(x[1]))];
  });
  let from = 0;
  let minIndent = 0;
  let found: number | null = null;
  for (const seg of segments) {
    let hit = -1;
    if (typeof seg === "number") {
      let n = -1;
      for (let i = from; i < lines.length; i++) {
        const t = lines[i].trimStart();
        if (lines[i].trim() && indentOf(lines[i]) < minIndent) break;
        if (t.startsWith("- ") || t === "-") { n++; if (n === seg) { hit = i; break; } }
      }
      if (hit < 0) return found;
      // keys of a list item start on the dash line itself
      from = hit; minIndent = indentOf(lines[hit]) + 1;
      lines[hit] = lines[hit].replace("-", " ");
    } else {
      const key = new RegExp(`^\\s*(- )?${seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\s*:`);
      for (let i = from; i < lines.length; i++) {
        if (lines[i].trim() && indentOf(lines[i]) < minIndent && i > from) break;
        if (key.test(lines[i])) { hit = i; break; }
      }
      if (hit < 0) return found;
      from = hit + 1; minIndent = indentOf(lines[hit]) + 1;
    }
    found = hit + 1;
  }
  return found;
}

/** Split the API's "a; b" message into problems with the line each names. */
export function locateProblems(text: string, apiMessage: string): LineProblem[] {
  return apiMessage.split("; ").map((problem) => {
    const parts = problem.split(": ");
    if (parts.length >= 3) {
      const path = parts[1];
      return { line: path.startsWith("<") ? null : lineOf(text, path), message: parts.slice(1).join(": ") };
    }
    return { line: null, message: problem };
  });
}
