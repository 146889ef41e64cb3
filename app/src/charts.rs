//! Server-rendered SVG charts: plain markup that reads without JavaScript and is re-rendered with the
//! rest of the page when live data arrives. Each chart is an image with a text summary (its `<title>`
//! and `<desc>`), each mark has its own `<title>`, and colour is never the only signal: the numbers
//! are printed beside the marks.

use leptos::prelude::*;

use crate::components::rendered_at_once;
use crate::fragments::{self, ChartKey};
use crate::model::{
    ActionDurations, HistoryView, HourBucket, PhaseCount, human_duration, phase_class,
};

const WIDTH: f64 = 720.0;

/// A coordinate to a tenth of a unit: the marks look the same, the markup is shorter, and writing it
/// is integer formatting (a float's shortest form was a tenth of the overview's render).
fn px(v: f64) -> String {
    let tenths = (v * 10.0).round() as i64;
    let (whole, tenth) = (tenths / 10, (tenths % 10).abs());
    match (tenth, tenths < 0 && whole == 0) {
        (0, _) => whole.to_string(),
        (_, true) => format!("-0.{tenth}"),
        (_, false) => format!("{whole}.{tenth}"),
    }
}

/// "10:00" of an RFC 3339 hour.
fn hour_label(start: &str) -> String {
    start.get(11..16).unwrap_or(start).to_owned()
}

const HOURLY_HEIGHT: f64 = 150.0;

/// Runs per hour over the last 24 hours: a stacked bar per hour, succeeded below, failed above.
#[component]
pub fn RunsPerHourChart(hours: Vec<HourBucket>) -> impl IntoView {
    let most = hours
        .iter()
        .map(|h| h.succeeded + h.failed)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let total: usize = hours.iter().map(|h| h.succeeded + h.failed).sum();
    let failed: usize = hours.iter().map(|h| h.failed).sum();
    let summary = format!(
        "{total} runs finished in the last 24 hours, {failed} of them failed; the busiest hour had {} runs",
        most as usize * usize::from(total > 0)
    );
    let marks = fragments::chart(ChartKey::RunsPerHour(hours.clone()), |_| {
        runs_per_hour_marks(&hours, most)
    });
    let caption = view! {
        <span class="key ok">"succeeded"</span> " " <span class="key bad">"failed"</span>
        " · " {summary.clone()}
    };
    view! {
        <Chart id="runs-hour" title="Runs per hour, last 24 hours" summary height=HOURLY_HEIGHT caption=caption.into_any()>
            <g inner_html=marks></g>
        </Chart>
    }
}

/// The runs-per-hour chart's axes and bars, `most` runs at the top.
fn runs_per_hour_marks(hours: &[HourBucket], most: f64) -> String {
    let (height, top, bottom, left) = (HOURLY_HEIGHT, 12.0, 22.0, 28.0);
    let plot = height - top - bottom;
    let slot = (WIDTH - left) / hours.len().max(1) as f64;
    let y = move |n: usize| top + plot - plot * n as f64 / most;
    let bars = hours
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let x = left + i as f64 * slot + 1.0;
            let w = (slot - 2.0).max(1.0);
            let (ok_top, all_top) = (y(h.succeeded), y(h.succeeded + h.failed));
            let label = format!(
                "{} UTC: {} succeeded, {} failed",
                hour_label(&h.start),
                h.succeeded,
                h.failed
            );
            let tick = (i % 6 == 0).then(|| {
                view! { <text class="axis" x=px(x) y=px(height - 6.0)>{hour_label(&h.start)}</text> }
            });
            view! {
                <g>
                    <title>{label}</title>
                    <rect class="bar ok" x=px(x) y=px(ok_top) width=px(w) height=px(top + plot - ok_top)/>
                    <rect class="bar bad" x=px(x) y=px(all_top) width=px(w) height=px(ok_top - all_top)/>
                    {tick}
                </g>
            }
        })
        .collect_view();
    rendered_at_once(view! {
        <text class="axis" x="0" y=px(top + 4.0)>{most as usize}</text>
        <text class="axis" x="0" y=px(top + plot)>"0"</text>
        <line class="grid-line" x1=px(left) x2=px(WIDTH) y1=px(top + plot) y2=px(top + plot)/>
        {bars}
    })
}

const DURATION_ROW: f64 = 26.0;

/// How long runs take per action: the median as a bar, the 95th percentile as a lighter bar behind it.
#[component]
pub fn DurationsChart(durations: Vec<ActionDurations>) -> impl IntoView {
    if durations.is_empty() {
        return view! { <p class="muted">"No finished run with a start and end time yet."</p> }
            .into_any();
    }
    let height = DURATION_ROW * durations.len() as f64 + 4.0;
    let marks = fragments::chart(ChartKey::Durations(durations.clone()), |_| {
        durations_marks(&durations)
    });
    let summary = durations
        .iter()
        .map(|d| {
            format!(
                "{} median {}, 95th percentile {}",
                d.action,
                human_duration(d.median_seconds),
                human_duration(d.p95_seconds)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let caption = view! {
        <span class="key median">"median"</span> " " <span class="key p95">"95th percentile"</span>
    };
    view! {
        <Chart id="durations" title="Run duration per action" summary height caption=caption.into_any()>
            <g inner_html=marks></g>
        </Chart>
    }
    .into_any()
}

/// The durations chart's bars, one row per action.
fn durations_marks(durations: &[ActionDurations]) -> String {
    let (row, label_w, value_w) = (DURATION_ROW, 110.0, 170.0);
    let longest = durations
        .iter()
        .map(|d| d.p95_seconds)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let span = WIDTH - label_w - value_w;
    let rows = durations
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let y = i as f64 * row + 4.0;
            let w = |s: i64| (span * s as f64 / longest).max(2.0);
            let text = format!(
                "median {}, p95 {} ({} runs)",
                human_duration(d.median_seconds),
                human_duration(d.p95_seconds),
                d.runs
            );
            view! {
                <g>
                    <title>{format!("{}: {text}", d.action)}</title>
                    <text class="label" x="0" y=px(y + 15.0)>{d.action.clone()}</text>
                    <rect class="bar p95" x=px(label_w) y=px(y) width=px(w(d.p95_seconds)) height=px(row - 8.0)/>
                    <rect class="bar median" x=px(label_w) y=px(y + 4.0) width=px(w(d.median_seconds)) height=px(row - 16.0)/>
                    <text class="value" x=px(WIDTH - value_w + 8.0) y=px(y + 15.0)>{text}</text>
                </g>
            }
        })
        .collect_view();
    rendered_at_once(rows)
}

/// Tenants by phase: one bar split by phase (an image), and beside it each phase's count as a link to
/// the filtered list (links inside an image would be controls nested in an image).
#[component]
pub fn PhaseChart(phases: Vec<PhaseCount>, total: usize) -> impl IntoView {
    let height = 28.0;
    let shown: Vec<PhaseCount> = phases.into_iter().filter(|p| p.count > 0).collect();
    let mut x = 0.0;
    let segments = shown
        .iter()
        .map(|p| {
            let w = WIDTH * p.count as f64 / total.max(1) as f64;
            let at = x;
            x += w;
            let class = format!(
                "segment {}",
                phase_class(&p.phase).trim_start_matches("badge ")
            );
            view! { <rect class=class x=px(at) y="0" width=px(w) height=px(height)/> }
        })
        .collect_view();
    let summary = shown
        .iter()
        .map(|p| format!("{} {}", p.count, p.phase))
        .collect::<Vec<_>>()
        .join(", ");
    let summary = if summary.is_empty() {
        "no tenants".to_owned()
    } else {
        summary
    };
    let links = shown
        .iter()
        .enumerate()
        .map(|(i, p)| {
            view! {
                {(i > 0).then_some(", ")}
                <a href=format!("/tenants?phase={}", p.phase)>{p.count} " " {p.phase.clone()}</a>
            }
        })
        .collect_view();
    let caption = if shown.is_empty() {
        view! { "no tenants" }.into_any()
    } else {
        links.into_any()
    };
    view! {
        <Chart id="phases" title="Tenants by phase" summary height caption>
            {segments}
        </Chart>
    }
}

/// A tenant's finished runs on one time axis, one lane per action, each run a mark from its start to
/// its end (outcome as colour and in its title), up to `now`.
#[component]
pub fn RunTimeline(history: Vec<HistoryView>, now: String) -> impl IntoView {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().ok().map(|t| t.as_second());
    let marks: Vec<(String, String, String, i64, i64)> = history
        .iter()
        .filter_map(|h| {
            let end = parse(&h.finished)?;
            let start = h.started.as_deref().and_then(parse).unwrap_or(end);
            Some((
                h.name.clone(),
                h.action.clone(),
                h.phase.clone(),
                start.min(end),
                end,
            ))
        })
        .collect();
    if marks.is_empty() {
        return ().into_any();
    }
    let mut lanes: Vec<String> = Vec::new();
    for (_, action, ..) in &marks {
        if !lanes.contains(action) {
            lanes.push(action.clone());
        }
    }
    let first = marks.iter().map(|m| m.3).min().unwrap_or(0);
    let last = parse(&now)
        .unwrap_or(first)
        .max(marks.iter().map(|m| m.4).max().unwrap_or(first));
    let span = (last - first).max(1) as f64;
    let (row, label_w) = (24.0, 110.0);
    let height = row * lanes.len() as f64 + 22.0;
    let x = move |t: i64| label_w + (WIDTH - label_w - 4.0) * (t - first) as f64 / span;
    let lane_labels = lanes
        .iter()
        .enumerate()
        .map(
            |(i, l)| view! { <text class="label" x="0" y=px(i as f64 * row + 16.0)>{l.clone()}</text> },
        )
        .collect_view();
    let runs = marks
        .iter()
        .map(|(name, action, phase, start, end)| {
            let lane = lanes.iter().position(|l| l == action).unwrap_or(0) as f64;
            let class = format!("mark {}", phase_class(phase).trim_start_matches("badge "));
            let took = human_duration(end - start);
            view! {
                <rect class=class x=px(x(*start)) y=px(lane * row + 4.0) width=px((x(*end) - x(*start)).max(4.0)) height=px(row - 8.0)>
                    <title>{format!("{name}: {phase} after {took}")}</title>
                </rect>
            }
        })
        .collect_view();
    let summary = format!(
        "{} finished runs over {}: {} failed",
        marks.len(),
        human_duration(last - first),
        marks.iter().filter(|m| m.2 == "Failed").count()
    );
    let caption = view! { {summary.clone()} }.into_any();
    view! {
        <Chart id="timeline" title="Run history" summary height caption>
            {lane_labels}
            {runs}
            <text class="axis" x=px(label_w) y=px(height - 4.0)>{human_duration(last - first)} " ago"</text>
            <text class="axis end" x=px(WIDTH - 4.0) y=px(height - 4.0)>"now"</text>
        </Chart>
    }
    .into_any()
}

/// A chart: an SVG image named by `title` and described by `summary` (what a screen reader reads),
/// `children` its marks, `caption` under it.
#[component]
fn Chart(
    id: &'static str,
    title: &'static str,
    summary: String,
    height: f64,
    caption: AnyView,
    children: Children,
) -> impl IntoView {
    let (title_id, desc_id) = (format!("{id}-title"), format!("{id}-desc"));
    let labelled_by = format!("{title_id} {desc_id}");
    let marks = rendered_at_once(view! {
        <title id=title_id>{title}</title>
        <desc id=desc_id>{summary}</desc>
        {children()}
    });
    view! {
        <figure class="chart">
            <svg viewBox=format!("0 0 {} {}", px(WIDTH), px(height)) role="img" aria-labelledby=labelled_by inner_html=marks></svg>
            <figcaption>{caption}</figcaption>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::px;

    #[test]
    fn a_coordinate_is_written_to_a_tenth() {
        assert_eq!(px(29.166_666_666_666_668), "29.2");
        assert_eq!(px(720.0), "720");
        assert_eq!(px(12.04), "12");
        assert_eq!(px(12.06), "12.1");
        assert_eq!(px(0.96), "1");
        assert_eq!(px(-0.25), "-0.3");
        assert_eq!(px(-1.5), "-1.5");
        assert_eq!(px(-20.0), "-20");
    }
}
