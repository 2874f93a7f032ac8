//! The inspector's memory timeline: what the arena held, sampled while the inspector is
//! shown, drawn with egui's painter (no file, no plotting crate).

use std::collections::VecDeque;

use egui::{Color32, Rect, Sense, Stroke, Ui};

/// One reading of the arena.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sample {
    /// Seconds since the inspector's first sample.
    pub t: f64,
    pub allocated: u64,
    pub reserved: u64,
    pub budget: Option<u64>,
}

/// The last `capacity` samples, oldest first.
#[derive(Debug)]
pub(crate) struct Timeline {
    pub samples: VecDeque<Sample>,
    pub capacity: usize,
}

impl Timeline {
    pub fn new(capacity: usize) -> Timeline {
        Timeline {
            samples: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Draws the timeline `height` points tall across the `Ui`'s width: reserved
    /// (filled), allocated (line) and the budget (a line where there is one), scaled to
    /// the largest of them; the newest figures as text.
    pub fn show(&self, ui: &mut Ui, height: f32) -> egui::Response {
        let width = ui.available_width().max(120.0);
        let (rect, response) = ui.allocate_exact_size(egui::vec2(width, height), Sense::hover());
        let painter = ui.painter_at(rect);
        painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
        let (Some(first), Some(last)) = (self.samples.front(), self.samples.back()) else {
            return response;
        };
        let top = self
            .samples
            .iter()
            .map(|s| s.reserved.max(s.allocated).max(s.budget.unwrap_or(0)))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let span = (last.t - first.t).max(1e-3);
        let at = |t: f64, bytes: u64| {
            egui::pos2(
                rect.left() + ((t - first.t) / span) as f32 * rect.width(),
                rect.bottom() - (bytes as f64 / top) as f32 * (rect.height() - 4.0),
            )
        };
        let reserved_color = Color32::from_rgb(70, 110, 170);
        let allocated_color = Color32::from_rgb(120, 220, 140);
        let budget_color = Color32::from_rgb(230, 90, 80);
        // Reserved as columns from the floor: one per sample, a filled area without a
        // concave-polygon tessellation.
        for pair in self.samples.iter().collect::<Vec<_>>().windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let r = Rect::from_min_max(
                egui::pos2(at(a.t, 0).x, at(a.t, a.reserved).y),
                egui::pos2(at(b.t, 0).x.max(at(a.t, 0).x + 1.0), rect.bottom()),
            );
            painter.rect_filled(r, 0.0, reserved_color.gamma_multiply(0.6));
        }
        let line = |value: &dyn Fn(&Sample) -> Option<u64>, color: Color32| {
            let points: Vec<egui::Pos2> = self
                .samples
                .iter()
                .filter_map(|s| value(s).map(|v| at(s.t, v)))
                .collect();
            if points.len() > 1 {
                painter.add(egui::Shape::line(points, Stroke::new(1.5, color)));
            }
        };
        line(&|s| Some(s.allocated), allocated_color);
        line(&|s| s.budget, budget_color);
        let mut legend = format!(
            "allocated {}   reserved {}",
            vramkit::fmt_bytes(last.allocated),
            vramkit::fmt_bytes(last.reserved)
        );
        if let Some(b) = last.budget {
            legend.push_str(&format!("   budget {}", vramkit::fmt_bytes(b)));
        }
        legend.push_str(&format!("   last {:.1} s", span));
        painter.text(
            rect.left_top() + egui::vec2(4.0, 2.0),
            egui::Align2::LEFT_TOP,
            legend,
            egui::FontId::monospace(10.0),
            ui.visuals().text_color(),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_samples() {
        let mut t = Timeline::new(3);
        for i in 0..5u64 {
            t.push(Sample {
                t: i as f64,
                allocated: i,
                reserved: i,
                budget: None,
            });
        }
        let kept: Vec<u64> = t.samples.iter().map(|s| s.allocated).collect();
        assert_eq!(kept, vec![2, 3, 4]);
    }
}
