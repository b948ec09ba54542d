//! `--html FILE`: one self-contained page with the text report and SVG plots of what was measured:
//! peak against batch and against input size with the ceiling drawn, the memory of the original
//! stage by stage, the peak with each module swapped, and the breakdown of the peak. Every point
//! is a trial of this diagnosis; nothing is interpolated. Plots are drawn by plotters' SVG backend;
//! their text is left to the browser's fonts.

use super::context::Context;
use crate::kinds::{AxisKind, AxisPlot};
use oom_search::{Diagnosis, Measurement, Outcome};
use oom_trial::fmt_bytes;
use plotters::prelude::*;

const MIB: f64 = 1024.0 * 1024.0;
const SIZE: (u32, u32) = (680, 340);
const FIT: RGBColor = RGBColor(46, 125, 50);
const OOM: RGBColor = RGBColor(198, 40, 40);

/// One measured point: x, MiB, whether it fit.
type Point = (f64, f64, bool);

/// A plot and the measurements drawn in it, printed under it as text (what a reader can copy, and
/// what the tests compare with the JSON report).
struct Figure {
    svg: String,
    /// `(label, MiB, fits)` of every point or bar (`None`: not a trial's outcome).
    data: Vec<(String, f64, Option<bool>)>,
}

impl Figure {
    fn html(&self) -> String {
        let data: Vec<String> = self
            .data
            .iter()
            .map(|(l, mib, fits)| {
                let bytes = (mib * MIB).round() as u64;
                let what = match fits {
                    Some(true) => " fits",
                    Some(false) => " OOM",
                    None => "",
                };
                format!(
                    "<span class=\"point\" data-bytes=\"{bytes}\">{}: {}{what}</span>",
                    escape(l),
                    fmt_bytes(bytes)
                )
            })
            .collect();
        format!(
            "<figure>{}<figcaption>{}</figcaption></figure>\n",
            self.svg,
            data.join("; ")
        )
    }
}

/// The page: title, plots, then the text report as printed.
pub fn page(d: &Diagnosis, cx: &Context<'_>, report_text: &str) -> String {
    let plots = [
        axis_plot(d, cx, AxisKind::Batch),
        axis_plot(d, cx, AxisKind::Size),
        stages_plot(cx),
        modules_plot(d, cx),
        breakdown_plot(cx),
    ];
    let mut figures = String::new();
    for f in plots.into_iter().flatten() {
        figures += &f.html();
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>oom-bisect: {title}</title>\n<style>\
         body{{font-family:sans-serif;max-width:1500px;margin:1em auto;padding:0 1em;color:#222}}\
         figure{{display:inline-block;margin:.5em;vertical-align:top;max-width:960px}} \
         figcaption{{font-size:11px;color:#555}} pre{{background:#f6f6f6;padding:1em;white-space:pre-wrap;font-size:13px}}\
         .estimate{{background:#fff3cd;border:1px solid #d39e00;padding:.5em 1em}}\
         </style></head><body>\n<h1>oom-bisect: {title}</h1>\n{estimate}\
         <p>Green: fits (its peak). Red: out of memory (what was in use when it failed plus the request). \
         Dashed: the ceiling, {ceiling}.</p>\n{figures}<h2>Report</h2>\n<pre>{report}</pre>\n</body></html>\n",
        title = escape(&cx.title),
        estimate = if cx.estimate {
            "<p class=\"estimate\"><b>Estimate:</b> every figure here is the model's memory \
             estimate; no model ran (accuracy: docs/estimate.md).</p>\n"
        } else {
            ""
        },
        ceiling = cx.ceiling_text(),
        report = escape(report_text),
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A point's height: the trial's one figure, as the report gives it, its need wherever its stream
/// was replayed (so fits sit under the ceiling and out-of-memories over it); else the peak of a
/// fit, or what an OOM tried to hold (or its peak before it).
fn mib(m: &Measurement) -> Option<Point> {
    let fits = m.outcome == Outcome::Fits;
    let bytes = match (m.outcome, m.need_bytes) {
        (Outcome::Inconclusive, _) => return None,
        (_, Some(need)) => need,
        (Outcome::Fits, None) => m.peak_bytes?,
        (Outcome::Oom, None) => m.failed_at_bytes.or(m.peak_bytes)?,
    };
    Some((0.0, bytes as f64 / MIB, fits))
}

/// A probe run without the ceiling: its need (else its peak), a fit where that is under `ceiling`.
fn free_mib(m: &Measurement, ceiling: u64) -> Option<Point> {
    match (m.outcome, m.need_bytes.or(m.peak_bytes)) {
        (Outcome::Fits, Some(b)) => Some((0.0, b as f64 / MIB, b <= ceiling)),
        _ => mib(m),
    }
}

/// Every first-run trial that changes only the axis of `kind` (run under the ceiling, or without it
/// by a search that probes so), at its x read back from the candidate's configuration.
fn axis_points(
    d: &Diagnosis,
    cx: &Context<'_>,
    kind: AxisKind,
    x_of: fn(&deeplab::Config) -> f64,
) -> Vec<Point> {
    let mut pts: Vec<Point> = d
        .trials
        .iter()
        .filter(|t| t.attempt == 0 && t.candidate.sets.len() == 1)
        .filter(|t| t.candidate.get(kind.key()).is_some())
        .filter_map(|t| {
            let (config, _) = crate::candidate::resolve(cx.config, &t.candidate).ok()?;
            let point = match t.candidate.unbounded {
                true => free_mib(&t.measurement, cx.ceiling?),
                false => mib(&t.measurement),
            };
            point.map(|(_, y, f)| (x_of(&config), y, f))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    pts
}

/// Peak against one axis; `None` when the axis has no plot or fewer than two values of it were
/// measured.
fn axis_plot(d: &Diagnosis, cx: &Context<'_>, kind: AxisKind) -> Option<Figure> {
    let AxisPlot {
        caption,
        x_desc,
        x_of,
    } = kind.plot()?;
    let pts = axis_points(d, cx, kind, x_of);
    if pts.len() < 2 {
        return None;
    }
    let ceiling = cx.ceiling? as f64 / MIB;
    let original = x_of(cx.config);
    let x_max = pts.iter().map(|p| p.0).fold(original, f64::max) * 1.05;
    let y_max = pts.iter().map(|p| p.1).fold(ceiling, f64::max) * 1.1;
    // From just under the lowest point, not from 0: the region around the ceiling is what matters.
    let y_min = pts.iter().map(|p| p.1).fold(ceiling, f64::min) * 0.9;
    // Batches are whole numbers: one tick per batch where they fit, never a fractional one.
    let x_ticks = match kind {
        AxisKind::Batch => (x_max as usize).clamp(2, 12),
        _ => 10,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_max, y_min..y_max)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("MiB")
            .x_labels(x_ticks)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .ok()?;
        ceiling_line(&mut chart, 0.0, x_max, ceiling)?;
        original_line(&mut chart, original, y_min, y_max)?;
        let fits: Vec<(f64, f64)> = pts.iter().filter(|p| p.2).map(|p| (p.0, p.1)).collect();
        chart
            .draw_series(LineSeries::new(fits.clone(), FIT.stroke_width(2)))
            .ok()?;
        draw_points(&mut chart, &pts)?;
    }
    let data = pts
        .iter()
        .map(|(x, y, f)| (format!("{x}"), *y, Some(*f)))
        .collect();
    Some(Figure { svg, data })
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The ceiling across a plot at height `y`, dashed and labelled.
fn ceiling_line(chart: &mut Chart<'_, '_>, x0: f64, x1: f64, y: f64) -> Option<()> {
    dashed_ceiling(chart, (x0, y), (x1, y))
}

/// A dashed line from `a` to `b`, labelled "ceiling" at `a` (the browser test looks for it).
fn dashed_ceiling(chart: &mut Chart<'_, '_>, a: (f64, f64), b: (f64, f64)) -> Option<()> {
    chart
        .draw_series(DashedLineSeries::new([a, b], 6, 4, BLACK.stroke_width(1)))
        .ok()?;
    let anchor = plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Bottom,
    );
    let font = ("sans-serif", 11).into_font().color(&BLACK).pos(anchor);
    chart
        .draw_series(std::iter::once(Text::new("ceiling", a, font)))
        .ok()?;
    Some(())
}

/// A dotted grey line at the original configuration's value, labelled.
fn original_line(chart: &mut Chart<'_, '_>, x: f64, y0: f64, y1: f64) -> Option<()> {
    let grey = RGBColor(120, 120, 120);
    chart
        .draw_series(DashedLineSeries::new(
            [(x, y0), (x, y1)],
            2,
            3,
            grey.stroke_width(1),
        ))
        .ok()?;
    chart
        .draw_series(std::iter::once(Text::new(
            "original",
            (x, y1),
            ("sans-serif", 12).into_font().color(&grey),
        )))
        .ok()?;
    Some(())
}

fn draw_points(chart: &mut Chart<'_, '_>, pts: &[Point]) -> Option<()> {
    chart
        .draw_series(pts.iter().map(|(x, y, fits)| {
            Circle::new((*x, *y), 4, if *fits { FIT.filled() } else { OOM.filled() })
        }))
        .ok()?;
    Some(())
}

/// In-use memory after each stage of the last step of the original under the ceiling, against
/// the ceiling. When it ran out of memory, the line ends in a red point at what the run needs
/// ([`failed_request`]), labelled with the phase it failed in, so it crosses the ceiling where the
/// run did; stage readings alone never do (the peak comes between them, and what is held in split
/// segments is not in use).
fn stages_plot(cx: &Context<'_>) -> Option<Figure> {
    let r = cx.original_report()?;
    let last_step = r.memory.stages.iter().map(|s| s.step).max()?;
    let mut rows: Vec<(String, u64, u64)> = (r.memory.stages.iter())
        .filter(|s| s.step == last_step)
        .map(|s| (s.name.clone(), s.in_use_bytes, s.device_bytes))
        .collect();
    let failed = failed_request(
        r,
        last_step,
        cx.whole_run().and_then(|(w, _)| w.need_bytes()),
    );
    if let Some((label, tried)) = &failed {
        rows.push((label.clone(), *tried, *tried));
    }
    if rows.len() < 2 {
        return None;
    }
    let ceiling = cx.ceiling? as f64 / MIB;
    let title = format!("memory after each stage, step {}", last_step + 1);
    let svg = stages_svg(&title, &rows, ceiling, failed.is_some())?;
    let data = (rows.iter())
        .map(|(name, in_use, _)| (name.clone(), *in_use as f64 / MIB, None))
        .collect();
    Some(Figure { svg, data })
}

/// `(label, bytes)` of the allocation that failed in step `step` of `r`, if one did: what the run
/// needs where that is known (in use, held in split segments and the context, so the line crosses
/// the ceiling as the run did), else what was in use plus the request.
fn failed_request(
    r: &oom_trial::TrialReport,
    step: usize,
    need: Option<u64>,
) -> Option<(String, u64)> {
    let oom = r.oom()?;
    if oom.step != Some(step) {
        return None;
    }
    let phase = oom.phase.map(|p| p.name()).unwrap_or("start");
    match need {
        Some(need) => Some((format!("OOM in {phase}: needs"), need)),
        None => Some((format!("OOM in {phase}"), r.failed_at()?)),
    }
}

/// A rotated label that hangs below its tick: plotters centres x labels on the tick whatever their
/// anchor, so the name is preceded by as many no-break spaces (which SVG does not collapse), and the
/// visible half starts at the tick.
fn hanging(name: &str) -> String {
    let pad: String = std::iter::repeat_n('\u{a0}', name.chars().count()).collect();
    format!("{pad}{name}")
}

/// The stages chart: in use and device lines (MiB) over the named stages, the ceiling dashed,
/// the last point red when it is the failed request.
fn stages_svg(
    title: &str,
    rows: &[(String, u64, u64)],
    ceiling: f64,
    ends_in_oom: bool,
) -> Option<String> {
    let n = rows.len() as f64;
    let y_max = (rows.iter())
        .map(|(_, u, d)| (*u).max(*d) as f64 / MIB)
        .fold(ceiling, f64::max)
        * 1.1;
    let names: Vec<&str> = rows.iter().map(|(name, _, _)| name.as_str()).collect();
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (SIZE.0 + 240, SIZE.1 + 80)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(130)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_max)
            .ok()?;
        let label_style = ("sans-serif", 11)
            .into_font()
            .transform(FontTransform::Rotate90);
        chart
            .configure_mesh()
            .x_labels(names.len())
            .x_label_formatter(&|x| {
                let i = x.round();
                match (i - x).abs() < 0.01 && i >= 0.0 {
                    true => names
                        .get(i as usize)
                        .map(|s| hanging(s))
                        .unwrap_or_default(),
                    false => String::new(),
                }
            })
            .x_label_style(label_style)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("MiB")
            .draw()
            .ok()?;
        ceiling_line(&mut chart, -0.5, n - 0.5, ceiling)?;
        let series = |f: fn(&(String, u64, u64)) -> u64| {
            (rows.iter().enumerate())
                .map(move |(i, row)| (i as f64, f(row) as f64 / MIB))
                .collect::<Vec<_>>()
        };
        let device = series(|r| r.2);
        chart
            .draw_series(LineSeries::new(device, BLUE.stroke_width(1)))
            .ok()?;
        let in_use = series(|r| r.1);
        chart
            .draw_series(LineSeries::new(in_use.clone(), FIT.stroke_width(2)))
            .ok()?;
        if let (true, Some(&(x, y))) = (ends_in_oom, in_use.last()) {
            draw_points(&mut chart, &[(x, y, false)])?;
        }
    }
    Some(svg)
}

/// The peak with each module item swapped alone, against the ceiling.
fn modules_plot(d: &Diagnosis, cx: &Context<'_>) -> Option<Figure> {
    let rows: Vec<(String, Point)> = d
        .module_costs
        .iter()
        .filter_map(|c| Some((c.label.clone(), mib(&c.measurement)?)))
        .collect();
    bars(
        "peak with each module swapped for identity",
        &rows,
        cx.ceiling.map(|c| c as f64 / MIB),
        true,
    )
}

/// The parts of the whole run's peak.
fn breakdown_plot(cx: &Context<'_>) -> Option<Figure> {
    let rows: Vec<(String, Point)> = cx
        .breakdown()?
        .iter()
        .map(|p| (p.part.to_string(), (0.0, p.bytes as f64 / MIB, true)))
        .collect();
    bars("what the peak is made of", &rows, None, false)
}

/// Horizontal bars, one per row, labelled on the left; the ceiling as a dashed line.
/// `outcomes`: the rows are trials, green when they fit, red when they ran out of memory.
fn bars(
    caption: &str,
    rows: &[(String, Point)],
    ceiling: Option<f64>,
    outcomes: bool,
) -> Option<Figure> {
    if rows.is_empty() {
        return None;
    }
    let n = rows.len() as f64;
    let x_max = rows
        .iter()
        .map(|r| r.1 .1)
        .fold(ceiling.unwrap_or(0.0), f64::max)
        * 1.1;
    let height = (80 + 26 * rows.len()) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, height.max(200))).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(190)
            .build_cartesian_2d(0.0..x_max, -0.5..n - 0.5)
            .ok()?;
        chart
            .configure_mesh()
            .y_labels(rows.len())
            .y_label_formatter(&|y| {
                let i = y.round();
                match (i - y).abs() < 0.01 && i >= 0.0 {
                    true => rows
                        .get(i as usize)
                        .map(|r| r.0.clone())
                        .unwrap_or_default(),
                    false => String::new(),
                }
            })
            .x_desc("MiB")
            .disable_y_mesh()
            .draw()
            .ok()?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, (_, (_, v, fits)))| {
                let y = i as f64;
                let color = if *fits { FIT } else { OOM };
                Rectangle::new([(0.0, y - 0.35), (*v, y + 0.35)], color.filled())
            }))
            .ok()?;
        if let Some(c) = ceiling {
            dashed_ceiling(&mut chart, (c, -0.5), (c, n - 0.5))?;
        }
    }
    let data = rows
        .iter()
        .map(|(l, (_, y, f))| (l.clone(), *y, outcomes.then_some(*f)))
        .collect();
    Some(Figure { svg, data })
}
