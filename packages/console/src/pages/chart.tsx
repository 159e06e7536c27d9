/** A hand-written SVG chart of daily values: one row of bars per series, each on its own scale (no chart library). */

export interface ChartSeries {
  label: string;
  /** `s1`, `s2` or `s3`: the series' colour (styles.css). */
  swatch: 's1' | 's2' | 's3';
  /** One value per day, in the order of `days`. */
  values: number[];
  /** How a value is written (the axis, the table and the summary). */
  format: (n: number) => string;
}

const WIDTH = 900;
const ROW = 80;
const GAP = 22;
const LEFT = 84;
const RIGHT = 8;
const AXIS = 22;

/** `2026-12-06` → `6 Dec` (UTC, as the days are). */
export function dayLabel(day: string): string {
  return new Date(`${day}T00:00:00Z`).toLocaleDateString(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' });
}

/** What the chart shows, in words: its screen-reader name. */
export function chartSummary(title: string, days: string[], series: ChartSeries[]): string {
  if (days.length === 0) return `${title}: no days to show`;
  const parts = series.map((s) => {
    const total = s.values.reduce((a, b) => a + b, 0);
    if (total === 0) return `${s.label}: none`;
    let peak = 0;
    s.values.forEach((v, i) => {
      if (v > (s.values[peak] ?? 0)) peak = i;
    });
    return `${s.label}: ${s.format(total)} in all, most on ${dayLabel(days[peak]!)} (${s.format(s.values[peak] ?? 0)})`;
  });
  return `${title}, ${dayLabel(days[0]!)} to ${dayLabel(days[days.length - 1]!)}. ${parts.join('; ')}.`;
}

/**
 * Bars by day for each series, one row per series (their units differ), with the days along the bottom. The SVG
 * is an image named by its summary; the same numbers are in a table under "Data table".
 */
export function DailyChart({ title, days, series }: { title: string; days: string[]; series: ChartSeries[] }) {
  const height = series.length * (ROW + GAP) + AXIS;
  const plot = WIDTH - LEFT - RIGHT;
  const slot = days.length > 0 ? plot / days.length : plot;
  const bar = Math.max(1, Math.min(28, slot * 0.7));
  // Label every day when they fit, else every few days (always the first and the last).
  const every = Math.max(1, Math.ceil(days.length / 12));
  return (
    <figure className="chart daily-chart">
      <figcaption>
        <span className="legend">
          {series.map((s) => (
            <span key={s.label}>
              <span className={`swatch ${s.swatch}`} aria-hidden="true" />
              {s.label}
            </span>
          ))}
        </span>
      </figcaption>
      {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a region that scrolls on a narrow screen must be reachable by keyboard */}
      <section className="chart-scroll" aria-label={`${title} (scrolls sideways on a narrow screen)`} tabIndex={0}>
        <svg viewBox={`0 0 ${WIDTH} ${height}`} role="img" aria-label={chartSummary(title, days, series)} data-testid="daily-chart">
          {series.map((s, row) => {
            const top = row * (ROW + GAP) + 6;
            const max = Math.max(0, ...s.values);
            return (
              <g key={s.label}>
                <text x={0} y={top + 10} className="chart-label">
                  {s.label}
                </text>
                {max > 0 ? (
                  <text x={LEFT - 6} y={top + 26} textAnchor="end" className="chart-tick">
                    {s.format(max)}
                  </text>
                ) : (
                  <text x={LEFT + 8} y={top + ROW - 8} className="chart-tick">
                    none this period
                  </text>
                )}
                <text x={LEFT - 6} y={top + ROW} textAnchor="end" className="chart-tick">
                  0
                </text>
                <line x1={LEFT} x2={WIDTH - RIGHT} y1={top + ROW} y2={top + ROW} className="chart-axis" />
                {max > 0 ? <line x1={LEFT} x2={WIDTH - RIGHT} y1={top + 22} y2={top + 22} className="chart-grid" /> : null}
                {s.values.map((v, i) => {
                  const h = max > 0 ? ((ROW - 22) * v) / max : 0;
                  const x = LEFT + i * slot + (slot - bar) / 2;
                  return (
                    <rect key={days[i]} x={x} y={top + ROW - h} width={bar} height={h} className={s.swatch}>
                      <title>{`${dayLabel(days[i]!)}: ${s.format(v)}`}</title>
                    </rect>
                  );
                })}
              </g>
            );
          })}
          {days.map((d, i) =>
            (i % every === 0 && days.length - 1 - i >= Math.ceil(every / 2)) || i === days.length - 1 ? (
              <text key={d} x={LEFT + i * slot + slot / 2} y={height - 6} textAnchor="middle" className="chart-tick">
                {dayLabel(d)}
              </text>
            ) : null,
          )}
        </svg>
      </section>
      <details>
        <summary>Data table</summary>
        <div className="table-wrap">
          <table>
            <caption className="muted">{title}</caption>
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                {series.map((s) => (
                  <th scope="col" key={s.label}>
                    {s.label}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {days.map((d, i) => (
                <tr key={d}>
                  <th scope="row">{dayLabel(d)}</th>
                  {series.map((s) => (
                    <td key={s.label}>{s.format(s.values[i] ?? 0)}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </figure>
  );
}
