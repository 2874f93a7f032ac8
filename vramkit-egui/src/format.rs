//! A texel as the source stores it, and how it is shown.

use std::fmt;

/// One level-0 texel of the image, exactly as its tile source stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct Texel {
    /// Column, level 0.
    pub x: u32,
    /// Row, level 0.
    pub y: u32,
    /// The source's texel format.
    pub format: wgpu::TextureFormat,
    /// The texel's bytes in that format.
    pub bytes: Vec<u8>,
}

impl Texel {
    /// The channels as numbers: integers 0-255 for the 8-bit formats, the values of the
    /// 16-bit float formats.
    pub fn channels(&self) -> Vec<f32> {
        use wgpu::TextureFormat as F;
        match self.format {
            F::R16Float | F::Rg16Float | F::Rgba16Float => self
                .bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => self.bytes.iter().map(|&b| f32::from(b)).collect(),
        }
    }
}

impl fmt::Display for Texel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = ["r", "g", "b", "a"];
        write!(f, "({}, {}) ", self.x, self.y)?;
        let channels = self.channels();
        let name: String = names.iter().take(channels.len()).copied().collect();
        write!(f, "{name}(")?;
        for (i, c) in channels.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{c}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_rgba8_as_integers_and_halves_as_floats() {
        let t = Texel {
            x: 3,
            y: 9,
            format: wgpu::TextureFormat::Rgba8Unorm,
            bytes: vec![1, 2, 250, 255],
        };
        assert_eq!(t.to_string(), "(3, 9) rgba(1, 2, 250, 255)");
        let h = Texel {
            x: 0,
            y: 0,
            format: wgpu::TextureFormat::Rg16Float,
            bytes: [0x3c00u16, 0xc000]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        };
        assert_eq!(h.channels(), vec![1.0, -2.0]);
    }
}
