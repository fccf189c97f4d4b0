//! The page's charts, drawn by `plotters` into SVG that the page holds inline. A chart is drawn
//! only when it has something to draw: otherwise the caller writes a sentence instead.

use plotters::prelude::*;

/// The series colours. Axes and grid are greys, never one of these, so a chart's marks are the
/// elements in these colours (the browser test counts them).
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0x25, 0x63, 0xEB),
    RGBColor(0xEA, 0x58, 0x0C),
    RGBColor(0x16, 0xA3, 0x4A),
    RGBColor(0xDC, 0x26, 0x26),
    RGBColor(0x7C, 0x3A, 0xED),
    RGBColor(0x0E, 0x74, 0x90),
];
pub const BLUE: RGBColor = PALETTE[0];
pub const ORANGE: RGBColor = PALETTE[1];
pub const GREEN: RGBColor = PALETTE[2];
pub const RED: RGBColor = PALETTE[3];
pub const PURPLE: RGBColor = PALETTE[4];

const AXIS: RGBColor = RGBColor(0x47, 0x55, 0x69);
const GRID: RGBColor = RGBColor(0xE2, 0xE8, 0xF0);
const SIZE: (u32, u32) = (760, 280);

/// One series: a name for the legend, a colour, and a value per x (None: no value there).
pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub values: Vec<Option<f64>>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: RGBColor, values: Vec<Option<f64>>) -> Self {
        Series { name: name.into(), color, values }
    }
}

/// How the y axis labels its values.
#[derive(Clone, Copy)]
pub enum Scale {
    Count,
    /// Fractions shown as percentages (0.25 → 25 %).
    Percent,
}

impl Scale {
    fn label(self, v: f64) -> String {
        match self {
            Scale::Count => compact(v),
            Scale::Percent => format!("{:.0} %", v * 100.0),
        }
    }
}

fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

type Drawn = Result<Option<String>, String>;

fn err(e: impl std::fmt::Display) -> String {
    format!("a chart could not be drawn: {e}")
}

fn y_top(series: &[Series], stacked: bool) -> f64 {
    let n = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    let max = if stacked {
        (0..n)
            .map(|i| series.iter().filter_map(|s| s.values.get(i).copied().flatten()).sum::<f64>())
            .fold(0.0, f64::max)
    } else {
        series.iter().flat_map(|s| s.values.iter().flatten().copied()).fold(0.0, f64::max)
    };
    // Room above the highest mark for the legend, drawn in the upper left: a line per series.
    let room = if series.len() > 1 { 1.15 + 0.1 * series.len() as f64 } else { 1.1 };
    if max > 0.0 {
        max * room
    } else {
        1.0
    }
}

/// Lines over `x` (labels of the x axis, one per value): a line per series, broken where a value
/// is missing; a lone value is drawn as a dot. None when no series has a value.
pub fn lines(x: &[String], series: &[Series], scale: Scale) -> Drawn {
    if x.is_empty() || series.iter().all(|s| s.values.iter().all(Option::is_none)) {
        return Ok(None);
    }
    let top = y_top(series, false);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let last = (x.len() as f64 - 1.0).max(1.0);
        let mut chart = frame(&root, 0f64..last, top, x, x.len().min(8), scale)?;
        for s in series {
            let mut labelled = false;
            let mut run: Vec<(f64, f64)> = vec![];
            let points = s.values.iter().enumerate().map(|(i, v)| v.map(|v| (i as f64, v)));
            for p in points.chain(std::iter::once(None)) {
                match p {
                    Some(p) => run.push(p),
                    None if run.is_empty() => {}
                    None => {
                        let segment = std::mem::take(&mut run);
                        let drawn = if segment.len() == 1 {
                            chart
                                .draw_series(segment.iter().map(|p| Circle::new(*p, 3, s.color.filled())))
                                .map_err(err)?
                        } else {
                            chart.draw_series(LineSeries::new(segment, s.color.stroke_width(2))).map_err(err)?
                        };
                        if !labelled {
                            let color = s.color;
                            drawn.label(s.name.clone()).legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                            });
                            labelled = true;
                        }
                    }
                }
            }
        }
        legend(&mut chart)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// Bars per category, side by side or stacked. None when there is no category or every value
/// is zero or missing.
pub fn bars(categories: &[String], series: &[Series], stacked: bool, scale: Scale) -> Drawn {
    let any = series.iter().any(|s| s.values.iter().flatten().any(|v| *v != 0.0));
    if categories.is_empty() || !any {
        return Ok(None);
    }
    let top = y_top(series, stacked);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = categories.len();
        let mut chart = frame(&root, -0.5f64..n as f64 - 0.5, top, categories, n.min(13) * 2 + 1, scale)?;
        // Side by side, only the series with a bar to draw share a category's width.
        let drawn: Vec<&Series> = series.iter().filter(|s| s.values.iter().flatten().any(|v| *v != 0.0)).collect();
        let width = if stacked { 0.7 } else { 0.8 / drawn.len() as f64 };
        let mut base = vec![0.0; n];
        for (k, s) in drawn.into_iter().enumerate() {
            let mut rects = vec![];
            for (i, v) in s.values.iter().enumerate().take(n) {
                let Some(v) = v.filter(|v| *v != 0.0) else { continue };
                let (x0, y0) =
                    if stacked { (i as f64 - width / 2.0, base[i]) } else { (i as f64 - 0.4 + k as f64 * width, 0.0) };
                rects.push(Rectangle::new([(x0, y0), (x0 + width, y0 + v)], s.color.filled()));
                if stacked {
                    base[i] += v;
                }
            }
            if rects.is_empty() {
                continue;
            }
            let color = s.color;
            chart
                .draw_series(rects)
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        if series.len() > 1 {
            legend(&mut chart)?;
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart's frame on `root`: x over `x`, y over 0..`top`; the x axis labelled with `labels` at
/// whole numbers (`ticks` tick positions asked for), the y axis in `scale`, grey axes and grid.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    x: std::ops::Range<f64>,
    top: f64,
    labels: &[String],
    ticks: usize,
    scale: Scale,
) -> Result<Chart<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(56)
        .build_cartesian_2d(x, 0f64..top)
        .map_err(err)?;
    let label = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).map_or_else(String::new, String::clone)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID)
        .axis_style(AXIS)
        .x_labels(ticks)
        .x_label_formatter(&label)
        .y_labels(6)
        .y_label_formatter(&|v| scale.label(*v))
        .label_style(("sans-serif", 12).into_font().color(&AXIS))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(GRID)
        .label_font(("sans-serif", 12).into_font().color(&AXIS))
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_draw_their_marks_and_nothing_when_there_is_nothing() {
        let x: Vec<String> = (1..=5).map(|d| format!("Nov {d}")).collect();
        let s =
            lines(&x, &[Series::new("views", BLUE, vec![Some(1.0), Some(3.0), None, Some(2.0), None])], Scale::Count)
                .unwrap()
                .unwrap();
        assert!(s.starts_with("<svg") && s.contains("#2563EB"), "{s}");
        assert!(s.contains("<polyline") && s.contains("<circle"), "a line and a lone dot: {s}");
        assert!(s.contains("Nov 1\n</text>"), "x labels: {s}");
        assert!(lines(&x, &[Series::new("views", BLUE, vec![None; 5])], Scale::Count).unwrap().is_none());
        assert!(lines(&[], &[], Scale::Count).unwrap().is_none());
        let cats = vec!["accepted".to_owned(), "pending".to_owned()];
        let b =
            bars(&cats, &[Series::new("n", GREEN, vec![Some(3.0), Some(0.0)])], false, Scale::Count).unwrap().unwrap();
        assert_eq!(b.matches("fill=\"#16A34A\"").count(), 1, "one bar, the zero not drawn: {b}");
        assert!(b.contains("accepted\n</text>") && b.contains("pending\n</text>"), "{b}");
        assert!(bars(&cats, &[Series::new("n", GREEN, vec![Some(0.0), None])], false, Scale::Count).unwrap().is_none());
        let stacked = bars(
            &cats,
            &[Series::new("a", GREEN, vec![Some(1.0), Some(2.0)]), Series::new("b", RED, vec![Some(1.0), None])],
            true,
            Scale::Percent,
        )
        .unwrap()
        .unwrap();
        assert!(stacked.contains("#DC2626") && stacked.contains(" %\n</text>"), "{stacked}");
    }
}
