//! Where the image is looked at: a center and a zoom in level-0 texels, kept in `f64` so
//! that a 2^20-texel image pans by fractions of a texel, and turned into the `f32`
//! mapping the shader and the CPU reference both use.

/// The view of a [`VirtualImage`](crate::VirtualImage): the texel at the widget's center
/// and the texels one screen pixel spans.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Level-0 texel coordinates at the center of the widget.
    pub center: [f64; 2],
    /// Level-0 texels per screen pixel (1.0 is 1:1; above 1 the image is shrunk).
    pub texels_per_pixel: f64,
}

/// Most magnification: 64 screen pixels per texel.
pub(crate) const MIN_TEXELS_PER_PIXEL: f64 = 1.0 / 64.0;

impl View {
    /// The whole image of `image` texels centered in a widget of `widget` pixels.
    pub fn fit(image: (u32, u32), widget: [f32; 2]) -> View {
        let tpp = (f64::from(image.0) / f64::from(widget[0].max(1.0)))
            .max(f64::from(image.1) / f64::from(widget[1].max(1.0)));
        View {
            center: [f64::from(image.0) / 2.0, f64::from(image.1) / 2.0],
            texels_per_pixel: tpp.max(MIN_TEXELS_PER_PIXEL),
        }
    }

    /// Moves the image with the pointer: `delta` screen pixels.
    pub fn pan(&mut self, delta: [f32; 2]) {
        for (c, d) in self.center.iter_mut().zip(delta) {
            *c -= f64::from(d) * self.texels_per_pixel;
        }
    }

    /// Zooms by `factor` (above 1 magnifies) keeping the texel under `at` (pixels from
    /// the widget's center) where it is; the zoom stays between 64 pixels per texel and
    /// `max_texels_per_pixel`.
    pub fn zoom(&mut self, factor: f32, at: [f32; 2], max_texels_per_pixel: f64) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        let before = self.texels_per_pixel;
        let after = (before / f64::from(factor)).clamp(
            MIN_TEXELS_PER_PIXEL,
            max_texels_per_pixel.max(MIN_TEXELS_PER_PIXEL),
        );
        for (c, p) in self.center.iter_mut().zip(at) {
            *c += f64::from(p) * (before - after);
        }
        self.texels_per_pixel = after;
    }

    /// The level-0 texel under the pixel `at` (pixels from the widget's center), if it
    /// lies in an image of `image` texels.
    pub fn texel_at(&self, at: [f32; 2], image: (u32, u32)) -> Option<(u32, u32)> {
        let x = (self.center[0] + f64::from(at[0]) * self.texels_per_pixel).floor();
        let y = (self.center[1] + f64::from(at[1]) * self.texels_per_pixel).floor();
        let inside = x >= 0.0 && y >= 0.0 && x < f64::from(image.0) && y < f64::from(image.1);
        inside.then_some((x as u32, y as u32))
    }

    /// The shader's mapping for a widget of `size` pixels: texture coordinates (0..1) at
    /// the widget's top-left pixel corner and per pixel, `uv = origin + p * scale` for the
    /// pixel center `p` measured from that corner.
    pub fn uv_mapping(&self, image: (u32, u32), size: [f32; 2]) -> ([f32; 2], [f32; 2]) {
        let w = f64::from(image.0);
        let h = f64::from(image.1);
        let origin = [
            (self.center[0] - f64::from(size[0]) / 2.0 * self.texels_per_pixel) / w,
            (self.center[1] - f64::from(size[1]) / 2.0 * self.texels_per_pixel) / h,
        ];
        let scale = [self.texels_per_pixel / w, self.texels_per_pixel / h];
        (
            [origin[0] as f32, origin[1] as f32],
            [scale[0] as f32, scale[1] as f32],
        )
    }

    /// The rectangle of the image this view shows in a widget of `size` pixels, in uv
    /// (min, max), for the overview.
    pub fn visible_uv(&self, image: (u32, u32), size: [f32; 2]) -> ([f32; 2], [f32; 2]) {
        let (origin, scale) = self.uv_mapping(image, size);
        (
            origin,
            [
                origin[0] + scale[0] * size[0],
                origin[1] + scale[1] * size[1],
            ],
        )
    }
}

/// The texture coordinates of pixel center `(x, y)` (pixels from the widget's top-left
/// corner) under `(origin, scale)`: the shader's arithmetic, in `f32` as it does it.
pub fn pixel_uv(origin: [f32; 2], scale: [f32; 2], x: u32, y: u32) -> [f32; 2] {
    [
        origin[0] + (x as f32 + 0.5) * scale[0],
        origin[1] + (y as f32 + 0.5) * scale[1],
    ]
}

/// The mip level the shader samples for `scale` (uv per pixel) of an image of `image`
/// texels: the finer level next to the texels one pixel spans.
pub fn level_for(scale: [f32; 2], image: (u32, u32), levels: u32) -> u32 {
    let layout = vramkit::vt::VtLayout {
        width: image.0,
        height: image.1,
        levels: levels.max(1),
    };
    layout.level_for([scale[0], 0.0], [0.0, scale[1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoom_keeps_the_texel_under_the_pointer() {
        let image = (1 << 20, 1 << 20);
        let mut v = View::fit(image, [800.0, 600.0]);
        let at = [123.0, -77.0];
        let before = v.texel_at(at, image);
        v.zoom(8.0, at, 1e9);
        assert_eq!(v.texel_at(at, image), before);
        v.zoom(1.0 / 3.0, at, 1e9);
        assert_eq!(v.texel_at(at, image), before);
    }

    #[test]
    fn zoom_is_bounded_and_ignores_nonsense() {
        let mut v = View::fit((1000, 1000), [100.0, 100.0]);
        v.zoom(1e9, [0.0, 0.0], 20.0);
        assert_eq!(v.texels_per_pixel, MIN_TEXELS_PER_PIXEL);
        v.zoom(1e-9, [0.0, 0.0], 20.0);
        assert_eq!(v.texels_per_pixel, 20.0);
        let before = v;
        v.zoom(f32::NAN, [0.0, 0.0], 20.0);
        v.zoom(0.0, [0.0, 0.0], 20.0);
        assert_eq!(v, before);
    }

    #[test]
    fn pan_moves_the_image_with_the_pointer() {
        let image = (4096, 4096);
        let mut v = View {
            center: [2048.0, 2048.0],
            texels_per_pixel: 2.0,
        };
        let under = v.texel_at([0.0, 0.0], image);
        v.pan([10.0, -4.0]);
        assert_eq!(v.texel_at([10.0, -4.0], image), under);
    }

    #[test]
    fn fit_shows_everything() {
        let image = (3000, 1000);
        let v = View::fit(image, [300.0, 200.0]);
        let (min, max) = v.visible_uv(image, [300.0, 200.0]);
        assert!(min[0] <= 1e-6 && min[1] <= 0.0 && max[0] >= 1.0 - 1e-6 && max[1] >= 1.0);
    }
}
