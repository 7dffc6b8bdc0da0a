"""The 13 condition operators, as a plain registry: name -> (value check, compile)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2

Test = Callable[[Any], bool]


class OperatorValueError(ValueError):
    """The value given to an operator has the wrong type or form."""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Operator:
    name: str
    kinds: frozenset[str]  # field kinds it applies to: str, int, ip
    summary: str
    build: Callable[[Any, str], Test]  # (value, field kind) -> test on the field's value
    inline: Callable[[Any, str], Inline] | None = None  # (value, field kind) -> (template, constant), when one expression


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise OperatorValueError(message)


def _norm(value: Any, kind: str) -> Any:
    if kind == "str":
        _need(isinstance(value, str), f"must be a string (got {type(value).__name__})")
        return value.lower()
    if kind == "int":
        _need(_is_number(value), f"must be a number (got {type(value).__name__})")
        return value
    _need(isinstance(value, str), f"must be an IP address string (got {type(value).__name__})")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise OperatorValueError(f"{value!r} is not an IP address") from None


# Most operators are one comparison: written once as a Python expression template over the field's value
# `{v}` and the operator's constant `{k}` (the value as checked and normalised below). `build` makes the test
# from it; matcher.compile_lazy writes the same expression inline into the generated matcher, with the
# constant bound through a tuple (no text of a rule file is ever compiled: only these templates).
Inline = tuple[str, Any]  # (template, constant)


def _equals(value: Any, kind: str) -> Inline:
    return "{v} == {k}", _norm(value, kind)


def _not_equals(value: Any, kind: str) -> Inline:
    return "{v} != {k}", _norm(value, kind)


def _wanted(value: Any, kind: str) -> frozenset[Any]:
    _need(isinstance(value, list) and value != [], "must be a non-empty list")
    return frozenset(_norm(v, kind) for v in value)


def _in(value: Any, kind: str) -> Inline:
    return "{v} in {k}", _wanted(value, kind)


def _not_in(value: Any, kind: str) -> Inline:
    return "{v} not in {k}", _wanted(value, kind)


def _text(value: Any) -> str:
    _need(isinstance(value, str) and value != "", "must be a non-empty string")
    return str(value).lower()


def _contains(value: Any, kind: str) -> Inline:
    return "{k} in {v}", _text(value)


def _startswith(value: Any, kind: str) -> Inline:
    return "{v}.startswith({k})", _text(value)


def _endswith(value: Any, kind: str) -> Inline:
    return "{v}.endswith({k})", _text(value)


# Rule regexes run on attacker-chosen text (query names, URIs, headers), so they are matched by
# RE2, in time linear in the text: a backtracking engine lets one DNS query for `aaaa…!` stall
# the analysis thread on `^(a+)+$`. RE2 refuses what it cannot do in linear time (backreferences,
# lookaround); the pattern's length and compiled size are capped too.
MAX_REGEX_LENGTH = 1024
_REGEX_MAX_MEM = 1 << 20  # bytes of RE2 program per pattern


def _regex_options() -> re2.Options:
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    options.max_mem = _REGEX_MAX_MEM
    return options


def _regex(value: Any, kind: str) -> Test:
    _need(isinstance(value, str) and value != "", "must be a non-empty regular expression string")
    _need(len(value) <= MAX_REGEX_LENGTH, f"regular expression longer than {MAX_REGEX_LENGTH} characters")
    try:
        pattern = re2.compile(value, _regex_options())
    except re2.error as err:
        reason = err.args[0].decode("utf-8", "replace") if err.args and isinstance(err.args[0], bytes) else str(err)
        raise OperatorValueError(f"regular expression not supported by RE2 (linear-time matching): {reason[:200]}") from None
    # A rule asks only "does it match": call the compiled RE2 (the same engine and fallbacks search() uses)
    # without the wrapper's per-call generator and offset mapping: 2-5x less per test (0.5-0.8 us vs 1-4 us).
    # `_regexp` and `_Anchor` belong to the pinned google-re2; test_operators.py holds this equal to search().
    match, unanchored = pattern._regexp.Match, re2._Anchor.UNANCHORED
    required = required_literal(value)
    leading = leading_run(value)
    run_class, run_length = leading if leading is not None else ("", 0)

    def search(got: str) -> bool:
        # Most texts lack the pattern's literal (`(^|\.)dnscat\.` against every new query name): a substring
        # test says so for a tenth of the RE2 call. ASCII texts only: there, the case-insensitive match of
        # an ASCII literal is exactly a match of its lower case.
        if required and got.isascii() and required not in got.lower():
            return False
        # Likewise most texts do not open with the run an anchored pattern starts with (`^\d{1,3}(...)$`
        # against SNIs, `^[a-z]{12,}\.` against query names).
        if run_length and got.isascii() and (len(got) < run_length or got[:run_length].lower().lstrip(run_class)):
            return False
        data = got.encode("utf-8")
        return match(unanchored, data, 0, len(data))[0][0] != -1

    return search


_REGEX_META = frozenset("\\^$.|?*+()[]{}")
_ESCAPED_LITERALS = frozenset(".-/_:@=+,;!#%&'\"<>~`$^*?()[]{}|\\ ")
_QUANTIFIER = re2.compile(r"^\{(\d+)(,\d*)?\}")
_FLAG_GROUP = re2.compile(r"^\(\?[a-zA-Z-]*\)")


def required_literal(pattern: str, shortest: int = 3) -> str:
    """The longest run of characters that every match of `pattern` holds, in lower case; "" when none of at
    least `shortest` characters is certain.

    Read conservatively, the way RE2 reads the syntax it shares with every engine: only the top level of the
    pattern (a `|` there, a non-ASCII character, an odd `{` or `]`, a POSIX class: no literal at all); groups,
    classes, anchors, `.` and escapes such as `\\d` end a run; a character made optional by `?`, `*` or
    `{0,...}` leaves it, and any quantifier ends it. What this returns is only ever a necessary condition: the
    tests hold the operator with it equal to RE2 alone on patterns and texts chosen to break it.
    """
    if not pattern.isascii():
        return ""
    runs: list[str] = []
    run: list[str] = []
    i, n = 0, len(pattern)

    def end_run() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return ""
            nxt = pattern[i + 1]
            i += 2
            if nxt in _ESCAPED_LITERALS:
                run.append(nxt)
            elif nxt.isalnum():  # \d \w \b \x41 \pL ...: not a literal of ours
                end_run()
                if nxt in "xpPQ":  # forms that run on past the escape letter: give up rather than parse them
                    return ""
            else:
                return ""
            continue
        if c == "(":
            if _FLAG_GROUP.search(pattern[i:]) is not None:
                return ""  # `(?i)` is no atom: a quantifier after it applies to what came before
            i = _group_end(pattern, i)
            if i < 0:
                return ""
            end_run()
            continue
        if c == "[":
            close = _class_end(pattern, i)
            if close < 0:
                return ""
            i = close + 1
            end_run()
            continue
        if c in "?*+{":
            if c == "{":
                found = _QUANTIFIER.search(pattern[i:])
                if found is None:
                    return ""
                optional = int(found.group(1)) == 0
                i += found.end() - found.start()
            else:
                optional = c != "+"
                i += 1
            if optional and run:
                run.pop()  # the character before may be absent
            end_run()  # with `+` or `{n>0}` it comes at least once: it stays, and the run ends after it
            if i < n and pattern[i] in "?+":  # lazy or possessive form of the same quantifier
                i += 1
            if i < n and pattern[i] in "?*+{":
                return ""  # stacked repetitions (`a+??` is `(a+?)?`): not read here
            continue
        if c == "|" or c in "])}":
            return ""
        if c in "^$.":
            end_run()
            i += 1
            continue
        run.append(c.lower())
        i += 1
    end_run()
    best = max(runs, key=len, default="")
    return best if len(best) >= shortest else ""


_RUN_QUANTIFIER = re2.compile(r"^(?:\{(\d+)(?:,\d*)?\}|\+)?")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def leading_run(pattern: str) -> tuple[str, int] | None:
    """(characters, n) when every match of `pattern` starts the text with n >= 1 characters of that set (lower
    case); None when that is not certain.

    Read conservatively: the pattern opens with `^` then `\\d` or a class of ASCII letters, digits and their
    ranges (`[a-z]`, `[0-9a-f]`; no negation, escape or other character), made at least n-fold by nothing,
    `+` or `{n,...}` (never `?`, `*` or `{0,...}`); the rest holds no `|` at the top level (an alternative
    need not start with `^`) and no `(?` (a flag such as `(?m)` changes what `^` means). The
    regex is case-insensitive, so a letter stands for both cases: the operator compares an ASCII text's
    lower case (non-ASCII letters fold onto ASCII ones, `ſ` onto `s`: such texts skip this prefilter).
    """
    if not pattern.isascii() or not pattern.startswith("^") or "(?" in pattern or _has_alternation(pattern):
        return None
    if pattern.startswith("^\\d"):
        chars, rest = "0123456789", pattern[3:]
    elif pattern.startswith("^["):
        close = pattern.find("]", 2)
        inside = pattern[2:close] if close > 2 else ""
        chars = _class_chars(inside)
        if not chars:
            return None
        rest = pattern[close + 1:]
    else:
        return None
    if rest[:1] in ("?", "*") or (rest[:1] == "{" and not rest[1:2].isdigit()):
        return None  # optional, or a brace not read here
    quantifier = _RUN_QUANTIFIER.search(rest)
    count = 1 if quantifier is None or quantifier.group(1) is None else int(quantifier.group(1))
    if count < 1:
        return None
    return "".join(sorted(set(chars.lower()))), count


def _class_chars(inside: str) -> str:
    """The characters of a class body made of ASCII letters, digits and ranges of one kind; "" otherwise."""
    chars: list[str] = []
    i = 0
    while i < len(inside):
        c = inside[i]
        if c not in _ALNUM:
            return ""
        if i + 2 < len(inside) and inside[i + 1] == "-":
            end = inside[i + 2]
            same_kind = (c.isdigit() and end.isdigit()) or (c.islower() and end.islower()) or (c.isupper() and end.isupper())
            if end not in _ALNUM or not same_kind or end < c:
                return ""
            chars += [chr(o) for o in range(ord(c), ord(end) + 1)]
            i += 3
            continue
        if i + 1 < len(inside) and inside[i + 1] == "-":
            return ""  # a trailing `-` is a literal dash: not read here
        chars.append(c)
        i += 1
    return "".join(chars)


def _has_alternation(pattern: str) -> bool:
    """Whether a `|` stands at the top level (outside groups, classes and escapes); True when unsure."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
        elif c == "[":
            i = _class_end(pattern, i) + 1
        elif c == "(":
            i = _group_end(pattern, i)
        elif c in "|)":
            return True  # a top-level `|`, or a `)` closing nothing
        else:
            i += 1
        if i <= 0:
            return True  # not read: say "maybe"
    return False


def _group_end(pattern: str, start: int) -> int:
    """The index just past the `)` closing the group opened at `start`, or -1 (unbalanced, or a class in it not
    read by _class_end)."""
    depth, i = 1, start + 1
    while i < len(pattern) and depth:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            close = _class_end(pattern, i)
            if close < 0:
                return -1
            i = close + 1
            continue
        depth += ch == "("
        depth -= ch == ")"
        i += 1
    return -1 if depth else i


def _class_end(pattern: str, start: int) -> int:
    """The index of the `]` closing the class opened at `start`, or -1 (unclosed, or a POSIX `[:name:]`)."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a `]` first in the class is one of its characters
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            return -1  # `[:alpha:]` and friends: not read here
        if ch == "]":
            return i
        i += 1
    return -1


def _cidr(value: Any, kind: str) -> Test:
    _need(isinstance(value, str), "must be a CIDR string such as 10.0.0.0/8")
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise OperatorValueError(f"{value!r} is not a CIDR") from None
    return lambda got: ipaddress.ip_address(got) in net


def _cmp(template: str) -> Callable[[Any, str], Inline]:
    def inline(value: Any, kind: str) -> Inline:
        _need(_is_number(value), f"must be a number (got {type(value).__name__})")
        return template, value
    return inline


def _exists(value: Any, kind: str) -> Inline:
    _need(isinstance(value, bool), "must be true or false")
    return ("{v} not in {k}" if value else "{v} in {k}"), ("", None)


def _in_list(value: Any, kind: str) -> Inline:
    from appliance.detection.dpi.tls_lists import fingerprint_lists

    lists = fingerprint_lists()
    _need(isinstance(value, str) and value in lists, f"must name a shipped list ({', '.join(sorted(lists))})")
    return "{v} in {k}", frozenset(lists[value])


def _inlined(inline: Callable[[Any, str], Inline]) -> Callable[[Any, str], Test]:
    """The test of an inline operator: its template compiled as a function of the value."""
    def build(value: Any, kind: str) -> Test:
        template, constant = inline(value, kind)
        return eval(f"lambda got: {template.format(v='got', k='k')}", {"k": constant})  # type: ignore[no-any-return]  # noqa: S307 - templates above only
    return build


_ALL = frozenset({"str", "int", "ip"})
OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("equals", _ALL, "the field equals the value (strings compare case-insensitively)", _inlined(_equals), _equals),
    Operator("not_equals", _ALL, "the field differs from the value", _inlined(_not_equals), _not_equals),
    Operator("in", _ALL, "the field equals one of the listed values", _inlined(_in), _in),
    Operator("not_in", _ALL, "the field equals none of the listed values", _inlined(_not_in), _not_in),
    Operator("contains", frozenset({"str"}), "the field contains the substring", _inlined(_contains), _contains),
    Operator("startswith", frozenset({"str"}), "the field starts with the value", _inlined(_startswith), _startswith),
    Operator("endswith", frozenset({"str"}), "the field ends with the value", _inlined(_endswith), _endswith),
    Operator("regex", frozenset({"str"}), "the regular expression (RE2 syntax, case-insensitive, linear time) matches somewhere", _regex),
    Operator("cidr", frozenset({"ip"}), "the address lies in the network", _cidr),
    Operator("gt", frozenset({"int"}), "the field is greater than the number", _inlined(_cmp("{v} > {k}")), _cmp("{v} > {k}")),
    Operator("lt", frozenset({"int"}), "the field is less than the number", _inlined(_cmp("{v} < {k}")), _cmp("{v} < {k}")),
    Operator("exists", _ALL, "true: the field has a value; false: it is empty or absent", _inlined(_exists), _exists),
    Operator("in_list", frozenset({"str"}), "the field is in the named shipped fingerprint list (appliance/detection/data/tls_fingerprints.csv)", _inlined(_in_list), _in_list),
)}
