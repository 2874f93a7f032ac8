//! Each kernel family's parameter block: a `#[repr(C)]` struct of eight 32-bit fields that
//! the WGSL `struct Params` of its shaders mirrors field by field, written into the
//! batch's uniform ring as it is (32 bytes, [`super::PARAMS_SIZE`]).
//!
//! [`kernel_params!`] declares one and lists its fields; a test parses every shipped
//! shader of the family and checks that its `Params` has the same fields, in the same
//! order, of the same types, at the same offsets. Floats go in as floats (no bit casts at
//! the call sites) and a field is set by name, never by position.

/// A kernel family's parameter block (see the module docs).
pub(super) trait KernelParams: bytemuck::Pod {
    /// Each field's name and WGSL type (`u32` or `f32`), in order (read by the test).
    #[cfg_attr(not(test), allow(dead_code))]
    const FIELDS: &'static [(&'static str, &'static str)];

    /// The block as the uniform ring holds it.
    fn block(self) -> super::Params {
        bytemuck::cast(self)
    }
}

/// Declares a parameter block: `kernel_params! { /// docs
/// pub(super) struct Name { a: u32, b: f32, ... } }`, eight 32-bit fields that the family's
/// WGSL `Params` mirrors; padding fields start with `_`.
macro_rules! kernel_params {
    ($(#[$doc:meta])* $vis:vis struct $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ident),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        $vis struct $name {
            $($(#[$fdoc])* pub(crate) $field: $ty,)*
        }
        const _: () = assert!(std::mem::size_of::<$name>() == $crate::kernels::PARAMS_SIZE as usize);
        impl $crate::kernels::params::KernelParams for $name {
            const FIELDS: &'static [(&'static str, &'static str)] =
                &[$((stringify!($field), stringify!($ty))),*];
        }
        impl From<$name> for $crate::kernels::Params {
            fn from(p: $name) -> Self {
                $crate::kernels::params::KernelParams::block(p)
            }
        }
    };
}
pub(super) use kernel_params;

#[cfg(test)]
mod tests {
    use super::KernelParams;
    use crate::shaders::Shader;

    /// The members of the struct `Params` in `shader`: name, WGSL scalar type and offset.
    fn wgsl_params(shader: &Shader) -> Vec<(String, String, u32)> {
        let source = shader.source().expect("shipped shaders expand");
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{}: {}", shader.name, e.emit_to_string(&source)));
        let (_, ty) = module
            .types
            .iter()
            .find(|(_, t)| t.name.as_deref() == Some("Params"))
            .unwrap_or_else(|| panic!("{} declares no `struct Params`", shader.name));
        let naga::TypeInner::Struct { members, .. } = &ty.inner else {
            panic!("{}: Params is not a struct", shader.name);
        };
        members
            .iter()
            .map(|m| {
                let scalar = match module.types[m.ty].inner {
                    naga::TypeInner::Scalar(naga::Scalar::U32) => "u32",
                    naga::TypeInner::Scalar(naga::Scalar::F32) => "f32",
                    ref other => panic!("{}: member {:?} is {other:?}", shader.name, m.name),
                };
                (
                    m.name.clone().unwrap_or_default(),
                    scalar.to_string(),
                    m.offset,
                )
            })
            .collect()
    }

    fn check<P: KernelParams>(family: &str, shaders: &[&[Shader]]) {
        let want: Vec<(String, String, u32)> = P::FIELDS
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| (name.to_string(), ty.to_string(), 4 * i as u32))
            .collect();
        let mut checked = 0;
        for shader in shaders.iter().copied().flatten() {
            assert_eq!(
                wgsl_params(shader),
                want,
                "{family}: {} against its Rust struct",
                shader.name
            );
            checked += 1;
        }
        assert!(checked > 0, "{family}: no shader checked");
    }

    #[test]
    fn every_family_s_wgsl_params_mirror_its_rust_struct() {
        use crate::kernels::{cast, elementwise, matmul, reduce, scan, softmax, transpose};
        check::<elementwise::ElementwiseParams>("elementwise", &[&elementwise::SHADERS]);
        check::<reduce::ReduceParams>("reduce", reduce::shaders::ALL);
        check::<scan::ScanParams>("scan", scan::shaders::ALL);
        check::<transpose::TransposeParams>("transpose", &[&[transpose::TRANSPOSE]]);
        check::<softmax::SoftmaxParams>("softmax", softmax::shaders::ALL);
        use matmul::shaders::*;
        let products: &[&[Shader]] = &[
            &[MATMUL_F32, MATMUL_F16_PACKED, MATMUL_F16_NATIVE],
            &MATMUL_VEC4_F32,
            &MATMUL_VEC4_F16_PACKED,
            &MATMUL_VEC4_F16_NATIVE,
            MATMUL_COOP_F16.as_flattened(),
        ];
        check::<matmul::MatmulParams>("matmul", products);
        check::<matmul::SplitSumParams>("matmul split sum", &[&[MATMUL_SPLIT_SUM]]);
        check::<cast::CastParams>("cast", &[&[cast::CAST_F16_PACKED]]);
        check::<cast::CastX8Params>("cast x8", &[&[cast::CAST_F16_X8]]);
    }
}
