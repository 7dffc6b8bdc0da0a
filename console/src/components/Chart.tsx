// A uPlot time-series chart: created once, fed new data on every render (no re-creation, so it is cheap).
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { fmtNumber } from "./ui.tsx";

export interface Series { label: string; color: string; values: number[] }

export function Chart({ title, times, series, height = 180 }: { title: string; times: number[]; series: Series[]; height?: number }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const el = box.current!;
    const opts: uPlot.Options = {
      width: Math.max(300, el.clientWidth || 600), height,
      axes: [{ stroke: "#aab" , grid: { stroke: "#2a2f3a" } }, { stroke: "#aab", grid: { stroke: "#2a2f3a" }, size: 56, values: (_u, vals) => vals.map((v) => fmtNumber(v)) }],
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2 }))],
      legend: { show: true },
    };
    plot.current = new uPlot(opts, [times, ...series.map((s) => s.values)], el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(300, el.clientWidth), height }));
    resize.observe(el);
    return () => { resize.disconnect(); plot.current?.destroy(); plot.current = null; };
  }, [series.length]);

  useEffect(() => {
    plot.current?.setData([times, ...series.map((s) => s.values)]);
  });

  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={`${title}: ${times.length} points`} data-points={times.length} />
    </figure>
  );
}
