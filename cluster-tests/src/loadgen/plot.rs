//! The report's plots as SVG: allocations placed and running over time, and the evaluation
//! latency distributions.

use super::Report;

/// Draw the report's plots as SVG into `dir`: `<name>-placements.svg` (allocations placed
/// over time) and `<name>-eval-latency.svg` (the distribution of evaluation latencies as a
/// cumulative curve).
pub fn plot(report: &Report, dir: &std::path::Path, name: &str) -> anyhow::Result<()> {
    use plotters::prelude::*;

    let placements = dir.join(format!("{name}-placements.svg"));
    {
        let root = SVGBackend::new(&placements, (800, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = report.samples.last().map_or(1.0, |s| s.t).max(0.001);
        let y_max = report
            .samples
            .iter()
            .map(|s| s.placed)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{name}: allocations placed ({:.0}/s overall)",
                    report.placements_per_second
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..t_max, 0u64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first job registration")
            .y_desc("allocations placed")
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                report.samples.iter().map(|s| (s.t, s.placed)),
                &BLUE,
            ))?
            .label("placed")
            .legend(legend_mark(BLUE));
        if report.config.run_allocs {
            chart
                .draw_series(LineSeries::new(
                    report.samples.iter().map(|s| (s.t, s.running)),
                    &GREEN,
                ))?
                .label("reported running by their nodes")
                .legend(legend_mark(GREEN));
        }
        if let Some(f) = &report.failover {
            chart
                .draw_series(LineSeries::new(
                    [(f.at_seconds, 0), (f.at_seconds, y_max)],
                    &RED,
                ))?
                .label(format!("leader {} killed", f.killed))
                .legend(legend_mark(RED));
        }
        draw_legend(&mut chart)?;
        root.present()?;
    }
    let latency = dir.join(format!("{name}-eval-latency.svg"));
    {
        let root = SVGBackend::new(&latency, (800, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let v = &report.eval_completion_latencies_ms;
        // The brokers' enqueue → ack histogram as a cumulative curve through its bucket bounds.
        let total = report
            .eval_latency_buckets
            .last()
            .map_or(0, |(_, c)| *c)
            .max(1) as f64;
        let mut broker: Vec<(f64, f64)> = vec![(0.0, 0.0)];
        let mut last = 0;
        for &(le, c) in &report.eval_latency_buckets {
            if le.is_finite() && c > last {
                broker.push((le * 1_000.0, c as f64 / total));
            }
            last = c;
        }
        if broker.len() > 1 {
            // Start the curve at the first bucket that holds anything.
            let first = broker[1].0 / 1.25;
            broker[0] = (first, 0.0);
        }
        let x_max = v
            .last()
            .copied()
            .unwrap_or(1.0)
            .max(broker.last().map_or(1.0, |p| p.0))
            .max(1.0);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{name}: evaluation latency (enqueue → ack p50 {:.0} ms, p99 {:.0} ms)",
                    report.eval_latency_ms.get("p50").copied().unwrap_or(0.0),
                    report.eval_latency_ms.get("p99").copied().unwrap_or(0.0)
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc("milliseconds")
            .y_desc("fraction of evaluations")
            .draw()?;
        chart
            .draw_series(LineSeries::new(broker, &BLUE))?
            .label("broker enqueue → ack (histogram buckets)")
            .legend(legend_mark(BLUE));
        let n = v.len().max(1) as f64;
        chart
            .draw_series(LineSeries::new(
                v.iter()
                    .enumerate()
                    .map(|(i, ms)| (*ms, (i + 1) as f64 / n)),
                &RED,
            ))?
            .label("create → complete (every evaluation)")
            .legend(legend_mark(RED));
        draw_legend(&mut chart)?;
        root.present()?;
    }
    Ok(())
}

/// A chart's legend, in the lower right corner.
fn draw_legend<'a, X: plotters::coord::ranged1d::Ranged, Y: plotters::coord::ranged1d::Ranged>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        plotters::prelude::SVGBackend<'a>,
        plotters::coord::cartesian::Cartesian2d<X, Y>,
    >,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A legend entry's mark: a short line in the series' colour.
fn legend_mark(
    color: plotters::style::RGBColor,
) -> impl Fn((i32, i32)) -> plotters::element::PathElement<(i32, i32)> {
    move |(x, y)| plotters::element::PathElement::new(vec![(x, y), (x + 20, y)], color)
}
