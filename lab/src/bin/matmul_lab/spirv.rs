//! Variants compiled to SPIR-V by the lab itself (first line `// lab: ... spirv`), so that
//! they can use what WGSL cannot say: their workgroup variables all share one block of
//! workgroup memory (`VK_KHR_workgroup_memory_explicit_layout`), and `subgroupBarrier()`
//! orders workgroup memory too.
//!
//! How: naga compiles the WGSL (the options wgpu uses for the library's trusted shaders,
//! but no zero-initialised workgroup memory, which the variants never read before
//! writing), then [`explicit_layout`]
//! rewrites the words: each workgroup variable's type becomes a `Block` struct of one member
//! at offset 0, every access chain into it gains the leading index 0, and all of them are
//! `Aliased`. A variant can then declare a `vec4<u32>` view of its `vec2<f16>` slices and
//! store eight halves at once, or stage its accumulators in the slices' own memory. The
//! device must have the extension and its features enabled ([`open`]) and
//! `PASSTHROUGH_SHADERS`, through which the words reach the driver untouched.
//!
//! Every variant built this way is still checked against the CPU by the lab before timing.

#[cfg(vulkan_hal)]
use ash::vk;

const OP_EXTENSION: u32 = 10;
const OP_CAPABILITY: u32 = 17;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_LOAD: u32 = 61;
const OP_STORE: u32 = 62;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
const OP_PTR_ACCESS_CHAIN: u32 = 67;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_CONTROL_BARRIER: u32 = 224;
const OP_CONSTANT_NULL: u32 = 46;
const OP_TYPE_COOP_MATRIX: u32 = 4456;
const OP_COOP_LOAD_TENSOR: u32 = 5367;
const OP_TYPE_TENSOR_LAYOUT: u32 = 5370;
const OP_CREATE_TENSOR_LAYOUT: u32 = 5372;
const OP_TENSOR_LAYOUT_SET_DIMENSION: u32 = 5373;
const OP_TENSOR_LAYOUT_SLICE: u32 = 5375;
const CAPABILITY_COOP_TENSOR_ADDRESSING: u32 = 5433;
const CAPABILITY_TENSOR_ADDRESSING: u32 = 5439;
const OP_COOP_LOAD: u32 = 4457;
const OP_COOP_STORE: u32 = 4458;

const STORAGE_WORKGROUP: u32 = 4;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_BLOCK: u32 = 2;
const DECORATION_ALIASED: u32 = 20;
const DECORATION_OFFSET: u32 = 35;
const CAPABILITY_FLOAT16: u32 = 9;
const CAPABILITY_EXPLICIT_LAYOUT: u32 = 4428;
const CAPABILITY_EXPLICIT_LAYOUT_16BIT: u32 = 4430;
const SCOPE_WORKGROUP: u32 = 2;
const SCOPE_SUBGROUP: u32 = 3;
const SEMANTICS_WORKGROUP_MEMORY: u32 = 0x100;

/// The rewrites a `spirv` variant asks for on its first line (`variant_text` reads them).
/// Every `spirv` variant gets [`explicit_layout`] and
/// [`subgroup_barriers_order_workgroup_memory`]; these are the optional ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rewrite {
    /// `coop2=MxKxN`: workgroup-scope matrices of a: M x K, b: K x N, c: M x N
    /// ([`workgroup_scope`]).
    pub workgroup_matrices: Option<[u32; 3]>,
    /// `tensor`: their loads through tensor layouts.
    pub tensor_loads: bool,
}

impl Rewrite {
    /// The rewrites named on a variant's first line `head`.
    pub fn parse(head: &str) -> Result<Rewrite, String> {
        let workgroup_matrices = match head
            .split_whitespace()
            .find_map(|w| w.strip_prefix("coop2="))
        {
            None => None,
            Some(field) => {
                let v: Vec<u32> = field
                    .split('x')
                    .map(|x| x.parse().map_err(|_| format!("coop2={field}: MxKxN")))
                    .collect::<Result<_, _>>()?;
                match v[..] {
                    [m, k, n] => Some([m, k, n]),
                    _ => return Err(format!("coop2={field}: MxKxN")),
                }
            }
        };
        Ok(Rewrite {
            workgroup_matrices,
            tensor_loads: head.contains(" tensor"),
        })
    }
}

/// naga's SPIR-V for the `matmul` entry point of a validated module: with `rewrite`, its
/// workgroup memory left to the kernel and the words rewritten ([`Rewrite`]); without, as
/// wgpu compiles the library's trusted shaders (native zero-initialised workgroup memory).
pub fn compile(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    rewrite: Option<&Rewrite>,
) -> Result<Vec<u32>, String> {
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        flags: naga::back::spv::WriterFlags::empty(),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Unchecked,
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: if rewrite.is_some() {
            naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None
        } else {
            naga::back::spv::ZeroInitializeWorkgroupMemoryMode::Native
        },
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline_options = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "matmul".into(),
    };
    let words = naga::back::spv::write_vec(module, info, &options, Some(&pipeline_options))
        .map_err(|e| e.to_string())?;
    let Some(rewrite) = rewrite else {
        return Ok(words);
    };
    let words = explicit_layout(&words)?;
    let words = subgroup_barriers_order_workgroup_memory(&words)?;
    match rewrite.workgroup_matrices {
        Some(sizes) => workgroup_scope(&words, sizes, rewrite.tensor_loads),
        None => Ok(words),
    }
}

/// Makes every cooperative matrix type workgroup-scope, a: M x K, b: K x N, c: M x N
/// (`sizes` = [M, K, N]): the driver then stages the operands through workgroup memory
/// itself (`SPV_NV_cooperative_matrix2`; the device needs `cooperativeMatrixWorkgroupScope`
/// and, for sizes past 16, `cooperativeMatrixFlexibleDimensions`).
///
/// With `tensor_loads`, each load of a or b becomes a tensor load
/// (`OpCooperativeMatrixLoadTensorNV`, `SPV_NV_tensor_addressing`) of the same region: a
/// layout of rows x stride elements from the load's pointer, sliced to the matrix.
pub fn workgroup_scope(
    words: &[u32],
    [m, k, n]: [u32; 3],
    tensor_loads: bool,
) -> Result<Vec<u32>, String> {
    let mut w = Words::parse(words)?;
    let uint = w.uint()?;
    let mut consts = Vec::new();
    let mut constant = |w: &mut Words, value: u32| {
        let id = w.fresh();
        consts.push(inst(OP_CONSTANT, &[uint, id, value]));
        id
    };
    let scope = constant(&mut w, SCOPE_WORKGROUP);
    let (cm, ck, cn) = (
        constant(&mut w, m),
        constant(&mut w, k),
        constant(&mut w, n),
    );
    let uses: Vec<(usize, u32)> = w
        .insts
        .iter()
        .enumerate()
        .filter(|(_, i)| op(i) == OP_TYPE_COOP_MATRIX)
        .map(|(at, i)| (at, i[6]))
        .collect();
    if uses.is_empty() {
        return Err("coop2: no cooperative matrix types".into());
    }
    for (at, use_id) in uses {
        let which = w
            .def(use_id)
            .filter(|d| op(d) == OP_CONSTANT)
            .map(|d| d[3])
            .ok_or("a matrix use that is not a constant")?;
        let (rows, cols) = match which {
            0 => (cm, ck),
            1 => (ck, cn),
            _ => (cm, cn),
        };
        let t = &mut w.insts[at];
        t[3] = scope;
        t[4] = rows;
        t[5] = cols;
    }
    // Tensor loads: a layout type and constants up front, each matrix type's null value
    // after the types, and the layout instructions before each load.
    let mut nulls = Vec::new();
    if tensor_loads {
        let two = constant(&mut w, 2);
        let zero = constant(&mut w, 0);
        let layout_ty = w.fresh();
        let mut null_of: Vec<(u32, u32)> = Vec::new();
        let mut at = 0;
        while at < w.insts.len() {
            let i = w.insts[at].clone();
            if op(&i) != OP_COOP_LOAD {
                at += 1;
                continue;
            }
            let (ty, result, ptr, layout, stride) = (i[1], i[2], i[3], i[4], i[5]);
            let def = w.def(ty).ok_or("a loaded type not found")?.clone();
            let row_major = w
                .def(layout)
                .filter(|d| op(d) == OP_CONSTANT)
                .is_some_and(|d| d[3] == 0);
            if !row_major {
                return Err("tensor loads: only row-major loads".into());
            }
            let (rows, cols) = (def[4], def[5]);
            let null = match null_of.iter().find(|&&(t, _)| t == ty) {
                Some(&(_, id)) => id,
                None => {
                    let id = w.fresh();
                    nulls.push(inst(OP_CONSTANT_NULL, &[ty, id]));
                    null_of.push((ty, id));
                    id
                }
            };
            let (l0, l1, l2) = (w.fresh(), w.fresh(), w.fresh());
            let seq = vec![
                inst(OP_CREATE_TENSOR_LAYOUT, &[layout_ty, l0]),
                inst(
                    OP_TENSOR_LAYOUT_SET_DIMENSION,
                    &[layout_ty, l1, l0, rows, stride],
                ),
                inst(
                    OP_TENSOR_LAYOUT_SLICE,
                    &[layout_ty, l2, l1, zero, rows, zero, cols],
                ),
                inst(OP_COOP_LOAD_TENSOR, &[ty, result, ptr, null, l2, 0, 0]),
            ];
            let len = seq.len();
            w.insts.splice(at..at + 1, seq);
            at += len;
        }
        consts.push(inst(OP_TYPE_TENSOR_LAYOUT, &[layout_ty, two, zero]));
    }
    let uint_at = w.def_at(uint).ok_or("no u32 type")?;
    w.insts.splice(uint_at + 1..uint_at + 1, consts);
    if !nulls.is_empty() {
        // After the last matrix type, which the nulls name.
        let at = w
            .after_last(&[OP_TYPE_COOP_MATRIX])
            .ok_or("no matrix type")?;
        w.insts.splice(at..at, nulls);
    }
    let ext_at = w.after_last(&[OP_EXTENSION]).ok_or("no extension")?;
    let mut exts = vec![inst(
        OP_EXTENSION,
        &string_words("SPV_NV_cooperative_matrix2"),
    )];
    if tensor_loads {
        exts.push(inst(
            OP_EXTENSION,
            &string_words("SPV_NV_tensor_addressing"),
        ));
        let caps_at = w.after_last(&[OP_CAPABILITY]).ok_or("no capabilities")?;
        w.insts.splice(
            caps_at..caps_at,
            [
                inst(OP_CAPABILITY, &[CAPABILITY_TENSOR_ADDRESSING]),
                inst(OP_CAPABILITY, &[CAPABILITY_COOP_TENSOR_ADDRESSING]),
            ],
        );
        let ext_at = ext_at + 2;
        w.insts.splice(ext_at..ext_at, exts);
    } else {
        w.insts.splice(ext_at..ext_at, exts);
    }
    Ok(w.finish())
}

/// The workgroup memory a module takes once its variables share one block: the largest.
pub fn shared_workgroup_bytes(module: &naga::Module) -> Result<u32, String> {
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| format!("laying out the types: {e}"))?;
    Ok(module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| layouter[v.ty].size)
        .max()
        .unwrap_or(0))
}

/// A module as its header and instructions (each whole, opcode word first).
struct Words {
    header: Vec<u32>,
    insts: Vec<Vec<u32>>,
}

impl Words {
    fn parse(words: &[u32]) -> Result<Words, String> {
        if words.len() < 5 || words[0] != 0x0723_0203 {
            return Err("not SPIR-V".into());
        }
        let mut insts = Vec::new();
        let mut at = 5;
        while at < words.len() {
            let count = (words[at] >> 16) as usize;
            if count == 0 || at + count > words.len() {
                return Err(format!("a broken instruction at word {at}"));
            }
            insts.push(words[at..at + count].to_vec());
            at += count;
        }
        Ok(Words {
            header: words[..5].to_vec(),
            insts,
        })
    }

    fn fresh(&mut self) -> u32 {
        let id = self.header[3];
        self.header[3] += 1;
        id
    }

    fn finish(self) -> Vec<u32> {
        let mut out = self.header;
        for inst in self.insts {
            out.extend(inst);
        }
        out
    }

    /// The index after the last instruction with opcode in `ops`, or `None`.
    fn after_last(&self, ops: &[u32]) -> Option<usize> {
        self.insts
            .iter()
            .rposition(|i| ops.contains(&op(i)))
            .map(|p| p + 1)
    }

    /// The instruction that defines `id`.
    fn def(&self, id: u32) -> Option<&Vec<u32>> {
        self.def_at(id).map(|at| &self.insts[at])
    }

    /// Where the instruction that defines `id` is.
    fn def_at(&self, id: u32) -> Option<usize> {
        self.insts.iter().position(|i| result_id(i) == Some(id))
    }

    /// The 32-bit unsigned integer type, which every variant's indices use.
    fn uint(&self) -> Result<u32, String> {
        self.insts
            .iter()
            .find(|i| op(i) == OP_TYPE_INT && i[2] == 32 && i[3] == 0)
            .map(|i| i[1])
            .ok_or_else(|| "no u32 type".to_string())
    }
}

fn op(inst: &[u32]) -> u32 {
    inst[0] & 0xffff
}

fn inst(opcode: u32, operands: &[u32]) -> Vec<u32> {
    let mut v = vec![((operands.len() as u32 + 1) << 16) | opcode];
    v.extend_from_slice(operands);
    v
}

/// The result id of the type, constant and variable instructions this pass reads.
fn result_id(inst: &[u32]) -> Option<u32> {
    match op(inst) {
        OP_TYPE_INT | OP_TYPE_FLOAT | OP_TYPE_VECTOR | OP_TYPE_ARRAY | OP_TYPE_STRUCT
        | OP_TYPE_POINTER | OP_TYPE_COOP_MATRIX => inst.get(1).copied(),
        OP_CONSTANT | OP_VARIABLE => inst.get(2).copied(),
        _ => None,
    }
}

/// Bytes of a scalar or vector type (the elements of the variants' workgroup arrays).
fn size_of(words: &Words, ty: u32) -> Result<u32, String> {
    let def = words.def(ty).ok_or(format!("type %{ty} not found"))?;
    match op(def) {
        OP_TYPE_INT | OP_TYPE_FLOAT => Ok(def[2] / 8),
        OP_TYPE_VECTOR => Ok(size_of(words, def[2])? * def[3]),
        _ => Err(format!(
            "a workgroup array of type %{ty} (opcode {}): only scalars and vectors are laid out here",
            op(def)
        )),
    }
}

/// Lays every workgroup variable out explicitly, all at offset 0 of one block (see the
/// module docs).
pub fn explicit_layout(words: &[u32]) -> Result<Vec<u32>, String> {
    let mut w = Words::parse(words)?;
    let vars: Vec<(u32, u32)> = w
        .insts
        .iter()
        .filter(|i| op(i) == OP_VARIABLE && i[3] == STORAGE_WORKGROUP)
        .map(|i| (i[2], i[1]))
        .collect();
    if vars.is_empty() {
        return Ok(words.to_vec());
    }
    let uint = w.uint()?;
    let zero = w.fresh();
    let mut blocks = Vec::new();
    let mut notes = Vec::new();
    let mut new_ptr = Vec::new();
    for &(var, ptr) in &vars {
        let pointee = w
            .def(ptr)
            .filter(|p| op(p) == OP_TYPE_POINTER)
            .map(|p| p[3])
            .ok_or(format!("pointer type %{ptr} not found"))?;
        let array = w.def(pointee).ok_or("a workgroup type not found")?.clone();
        if op(&array) != OP_TYPE_ARRAY {
            return Err(format!("workgroup variable %{var} is not an array"));
        }
        let strided = w
            .insts
            .iter()
            .any(|i| op(i) == OP_DECORATE && i[1] == pointee && i[2] == DECORATION_ARRAY_STRIDE);
        if !strided {
            let stride = size_of(&w, array[2])?;
            notes.push(inst(
                OP_DECORATE,
                &[pointee, DECORATION_ARRAY_STRIDE, stride],
            ));
        }
        let block = w.fresh();
        let block_ptr = w.fresh();
        blocks.push((
            var,
            vec![
                inst(OP_TYPE_STRUCT, &[block, pointee]),
                inst(OP_TYPE_POINTER, &[block_ptr, STORAGE_WORKGROUP, block]),
            ],
        ));
        notes.push(inst(OP_DECORATE, &[block, DECORATION_BLOCK]));
        notes.push(inst(OP_MEMBER_DECORATE, &[block, 0, DECORATION_OFFSET, 0]));
        if vars.len() > 1 {
            notes.push(inst(OP_DECORATE, &[var, DECORATION_ALIASED]));
        }
        new_ptr.push((var, block_ptr));
    }
    // Every use of a variable: access chains gain the index of the block's one member;
    // anything else that takes the variable whole is refused.
    for i in &mut w.insts {
        let o = op(i);
        if matches!(o, OP_ACCESS_CHAIN | OP_IN_BOUNDS_ACCESS_CHAIN) {
            if vars.iter().any(|&(v, _)| v == i[3]) {
                i.insert(4, zero);
                i[0] = ((i.len() as u32) << 16) | o;
            }
        } else if o == OP_VARIABLE && i[3] == STORAGE_WORKGROUP {
            if i.len() > 4 {
                return Err("a workgroup variable with an initializer".into());
            }
            if let Some(&(_, p)) = new_ptr.iter().find(|&&(v, _)| v == i[2]) {
                i[1] = p;
            }
        } else {
            let pointer_at = match o {
                OP_LOAD | OP_COOP_LOAD => Some(3),
                OP_STORE | OP_COOP_STORE => Some(1),
                OP_PTR_ACCESS_CHAIN => Some(3),
                _ => None,
            };
            if let Some(at) = pointer_at {
                if vars.iter().any(|&(v, _)| i.get(at) == Some(&v)) {
                    return Err(format!("opcode {o} takes a workgroup variable whole"));
                }
            }
        }
    }
    // Each block and its pointer type just before its variable (after the array type);
    // the constant just after the u32 type; decorations at the end of the annotations;
    // capabilities and the extension at the front.
    for (var, decls) in blocks {
        let at = w
            .insts
            .iter()
            .position(|i| op(i) == OP_VARIABLE && i[2] == var)
            .ok_or("a variable vanished")?;
        w.insts.splice(at..at, decls);
    }
    let uint_at = w.def_at(uint).ok_or("no u32 type")?;
    w.insts
        .insert(uint_at + 1, inst(OP_CONSTANT, &[uint, zero, 0]));
    let notes_at = w
        .after_last(&[OP_DECORATE, OP_MEMBER_DECORATE])
        .ok_or("no decorations")?;
    w.insts.splice(notes_at..notes_at, notes);
    let mut caps = vec![inst(OP_CAPABILITY, &[CAPABILITY_EXPLICIT_LAYOUT])];
    if w.insts
        .iter()
        .any(|i| op(i) == OP_CAPABILITY && i[1] == CAPABILITY_FLOAT16)
    {
        caps.push(inst(OP_CAPABILITY, &[CAPABILITY_EXPLICIT_LAYOUT_16BIT]));
    }
    let caps_at = w.after_last(&[OP_CAPABILITY]).ok_or("no capabilities")?;
    let n_caps = caps.len();
    w.insts.splice(caps_at..caps_at, caps);
    let ext_at = w.after_last(&[OP_EXTENSION]).unwrap_or(caps_at + n_caps);
    w.insts.insert(
        ext_at,
        inst(
            OP_EXTENSION,
            &string_words("SPV_KHR_workgroup_memory_explicit_layout"),
        ),
    );
    Ok(w.finish())
}

/// naga's `subgroupBarrier()` names subgroup memory only; this adds workgroup memory to
/// the semantics of every barrier whose execution scope is the subgroup, so that a variant
/// can order a subgroup's own staging area in workgroup memory without stopping the others.
pub fn subgroup_barriers_order_workgroup_memory(words: &[u32]) -> Result<Vec<u32>, String> {
    let mut w = Words::parse(words)?;
    let constant = |w: &Words, id: u32| {
        w.def(id)
            .filter(|d| op(d) == OP_CONSTANT)
            .map(|d| (d[1], d[3]))
    };
    let mut patched = Vec::new();
    for (n, i) in w.insts.iter().enumerate() {
        if op(i) == OP_CONTROL_BARRIER {
            let scope = constant(&w, i[1]).ok_or("a barrier scope that is not a constant")?;
            if scope.1 == SCOPE_SUBGROUP {
                let (ty, semantics) =
                    constant(&w, i[3]).ok_or("barrier semantics that are not a constant")?;
                patched.push((n, ty, semantics | SEMANTICS_WORKGROUP_MEMORY));
            }
        }
    }
    if patched.is_empty() {
        return Ok(words.to_vec());
    }
    let mut consts = Vec::new();
    for (n, ty, semantics) in patched {
        let id = w.fresh();
        consts.push(inst(OP_CONSTANT, &[ty, id, semantics]));
        w.insts[n][3] = id;
    }
    // After the last constant: its type is declared by then.
    let at = w.after_last(&[OP_CONSTANT]).ok_or("no constant")?;
    w.insts.splice(at..at, consts);
    Ok(w.finish())
}

/// A SPIR-V literal string: UTF-8, NUL-terminated, in little-endian words.
fn string_words(s: &str) -> Vec<u32> {
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    while !bytes.len().is_multiple_of(4) {
        bytes.push(0);
    }
    bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(vulkan_hal)]
/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV` (ash 0.38 predates it).
#[repr(C)]
struct CoopMat2Features {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    workgroup_scope: vk::Bool32,
    flexible_dimensions: vk::Bool32,
    reductions: vk::Bool32,
    conversions: vk::Bool32,
    per_element_operations: vk::Bool32,
    tensor_addressing: vk::Bool32,
    block_loads: vk::Bool32,
}

#[cfg(vulkan_hal)]
/// The extension's features structure, every feature off.
fn coopmat2_features() -> CoopMat2Features {
    CoopMat2Features {
        s_type: vk::StructureType::from_raw(COOPMAT2_FEATURES),
        p_next: std::ptr::null_mut(),
        workgroup_scope: 0,
        flexible_dimensions: 0,
        reductions: 0,
        conversions: 0,
        per_element_operations: 0,
        tensor_addressing: 0,
        block_loads: 0,
    }
}

#[cfg(vulkan_hal)]
/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
struct CoopMat2Properties {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    workgroup_scope_max_workgroup_size: u32,
    flexible_dimensions_max_dimension: u32,
    workgroup_scope_reserved_shared_memory: u32,
}

#[cfg(vulkan_hal)]
/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FlexibleDimensions {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: vk::ComponentTypeKHR,
    b_type: vk::ComponentTypeKHR,
    c_type: vk::ComponentTypeKHR,
    result_type: vk::ComponentTypeKHR,
    saturating_accumulation: vk::Bool32,
    scope: vk::ScopeKHR,
    workgroup_invocations: u32,
}

#[cfg(vulkan_hal)]
pub const COOPMAT2: &std::ffi::CStr = c"VK_NV_cooperative_matrix2";
#[cfg(vulkan_hal)]
const COOPMAT2_FEATURES: i32 = 1_000_593_000;
#[cfg(vulkan_hal)]
const COOPMAT2_FLEXIBLE: i32 = 1_000_593_001;
#[cfg(vulkan_hal)]
const COOPMAT2_PROPERTIES: i32 = 1_000_593_002;

#[cfg(vulkan_hal)]
/// Prints what the adapter says of `VK_NV_cooperative_matrix2`: its features, limits and
/// the flexible dimensions it runs. Returns the features the `coop2` variants use
/// (workgroup scope, flexible dimensions, and tensor addressing where offered), or `None`
/// where workgroup scope or flexible dimensions are not offered.
///
/// # Safety
/// `adapter` is a live hal adapter.
unsafe fn describe_coopmat2(adapter: &wgpu::hal::vulkan::Adapter) -> Option<CoopMat2Features> {
    let shared = adapter.shared_instance();
    let instance = shared.raw_instance();
    let phd = adapter.raw_physical_device();
    // SAFETY: as the function's; each query gets structures of the sizes it writes.
    unsafe {
        let mut features = coopmat2_features();
        let mut query = vk::PhysicalDeviceFeatures2 {
            p_next: (&mut features as *mut CoopMat2Features).cast(),
            ..Default::default()
        };
        instance.get_physical_device_features2(phd, &mut query);
        let mut props = CoopMat2Properties {
            s_type: vk::StructureType::from_raw(COOPMAT2_PROPERTIES),
            p_next: std::ptr::null_mut(),
            workgroup_scope_max_workgroup_size: 0,
            flexible_dimensions_max_dimension: 0,
            workgroup_scope_reserved_shared_memory: 0,
        };
        let mut pquery = vk::PhysicalDeviceProperties2 {
            p_next: (&mut props as *mut CoopMat2Properties).cast(),
            ..Default::default()
        };
        instance.get_physical_device_properties2(phd, &mut pquery);
        println!(
            "# coopmat2: workgroup scope {}, flexible dimensions {}, tensor addressing {}, \
             block loads {}; max workgroup {}, max dimension {}, reserved shared memory {} bytes",
            features.workgroup_scope,
            features.flexible_dimensions,
            features.tensor_addressing,
            features.block_loads,
            props.workgroup_scope_max_workgroup_size,
            props.flexible_dimensions_max_dimension,
            props.workgroup_scope_reserved_shared_memory
        );
        type Get = unsafe extern "system" fn(
            vk::PhysicalDevice,
            *mut u32,
            *mut FlexibleDimensions,
        ) -> vk::Result;
        let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
        if let Some(f) = shared
            .entry()
            .get_instance_proc_addr(instance.handle(), name.as_ptr())
        {
            let get: Get = std::mem::transmute(f);
            let mut count = 0u32;
            let _ = get(phd, &mut count, std::ptr::null_mut());
            let blank = FlexibleDimensions {
                s_type: vk::StructureType::from_raw(COOPMAT2_FLEXIBLE),
                p_next: std::ptr::null_mut(),
                m_granularity: 0,
                n_granularity: 0,
                k_granularity: 0,
                a_type: vk::ComponentTypeKHR::FLOAT16,
                b_type: vk::ComponentTypeKHR::FLOAT16,
                c_type: vk::ComponentTypeKHR::FLOAT16,
                result_type: vk::ComponentTypeKHR::FLOAT16,
                saturating_accumulation: 0,
                scope: vk::ScopeKHR::SUBGROUP,
                workgroup_invocations: 0,
            };
            let mut list = vec![blank; count as usize];
            let _ = get(phd, &mut count, list.as_mut_ptr());
            for d in list.iter().take(count as usize) {
                println!(
                    "# coopmat2 flexible: granularity m {} n {} k {}, {:?} x {:?} + {:?} -> {:?}, scope {:?}, {} invocations",
                    d.m_granularity,
                    d.n_granularity,
                    d.k_granularity,
                    d.a_type,
                    d.b_type,
                    d.c_type,
                    d.result_type,
                    d.scope,
                    d.workgroup_invocations
                );
            }
        }
        (features.workgroup_scope != 0 && features.flexible_dimensions != 0).then(|| {
            CoopMat2Features {
                workgroup_scope: 1,
                flexible_dimensions: 1,
                tensor_addressing: features.tensor_addressing,
                ..coopmat2_features()
            }
        })
    }
}

/// The extensions the lab's own device enables where the adapter offers them.
#[cfg(vulkan_hal)]
pub const EXECUTABLE_PROPERTIES: &std::ffi::CStr = ash::khr::pipeline_executable_properties::NAME;
#[cfg(vulkan_hal)]
pub const EXPLICIT_LAYOUT: &std::ffi::CStr = ash::khr::workgroup_memory_explicit_layout::NAME;

/// The lab's own device on the best Vulkan adapter (and that adapter): wgpu's device with
/// the features the kernels use and, where offered, `PASSTHROUGH_SHADERS` and three
/// extensions wgpu does not enable, with their features: [`EXECUTABLE_PROPERTIES`] (the
/// driver's statistics, `driver_stats.rs`), [`EXPLICIT_LAYOUT`] and [`COOPMAT2`] (the
/// `spirv` variants). [`enabled`] says which it got.
#[cfg(vulkan_hal)]
pub fn open() -> Result<(wgpu::Adapter, wgpu::Device, wgpu::Queue), String> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(desc);
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| format!("no Vulkan adapter ({e})"))?;
    let features = adapter.features()
        & (wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
            | wgpu::Features::PASSTHROUGH_SHADERS
            | wgpu::Features::TIMESTAMP_QUERY);
    let desc = wgpu::DeviceDescriptor {
        label: Some("matmul_lab"),
        required_features: features,
        required_limits: adapter.limits(),
        // SAFETY: a measuring tool; its kernels are checked against the CPU.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    let mut executable = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    let mut layout = vk::PhysicalDeviceWorkgroupMemoryExplicitLayoutFeaturesKHR::default()
        .workgroup_memory_explicit_layout(true)
        .workgroup_memory_explicit_layout16_bit_access(true);
    let mut coopmat2 = None;
    // SAFETY: the hal device is opened from this adapter's own hal object with the features
    // and limits wgpu is then given (`create_device_from_hal` requires a subset of what the
    // hal device has: the same set); the callback only adds extensions the adapter reports
    // and their features, as wgpu-hal's `CreateDeviceCallback` allows.
    unsafe {
        let hal_adapter = adapter
            .as_hal::<wgpu::hal::api::Vulkan>()
            .ok_or("the adapter is not Vulkan")?;
        let caps = hal_adapter.physical_device_capabilities();
        let has_executable = caps.supports_extension(EXECUTABLE_PROPERTIES);
        let has_layout = caps.supports_extension(EXPLICIT_LAYOUT);
        if caps.supports_extension(COOPMAT2) {
            coopmat2 = describe_coopmat2(&hal_adapter);
        }
        let (executable, layout, coopmat2) = (&mut executable, &mut layout, coopmat2.as_mut());
        let add: Box<wgpu::hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            let mut info = std::mem::take(args.create_info);
            if has_executable {
                args.extensions.push(EXECUTABLE_PROPERTIES);
                info = info.push_next(executable);
            }
            if has_layout {
                args.extensions.push(EXPLICIT_LAYOUT);
                info = info.push_next(layout);
            }
            if let Some(coopmat2) = coopmat2 {
                // ash 0.38 has no type for it: linked by hand, as `push_next` would.
                args.extensions.push(COOPMAT2);
                coopmat2.p_next = info.p_next.cast_mut();
                info.p_next = (coopmat2 as *mut CoopMat2Features).cast_const().cast();
            }
            *args.create_info = info;
        });
        let open = hal_adapter
            .open_with_callback(
                desc.required_features,
                &desc.required_limits,
                &desc.memory_hints,
                Some(add),
            )
            .map_err(|e| format!("opening the device: {e}"))?;
        drop(hal_adapter);
        let (device, queue) = adapter
            .create_device_from_hal::<wgpu::hal::api::Vulkan>(open, &desc)
            .map_err(|e| format!("wgpu refused the device: {e}"))?;
        Ok((adapter, device, queue))
    }
}

/// Whether `device` (from [`open`]) has `extension` enabled.
#[cfg(vulkan_hal)]
pub fn enabled(device: &wgpu::Device, extension: &std::ffi::CStr) -> bool {
    // SAFETY: reads the list of extensions the device was made with; touches nothing.
    unsafe {
        device
            .as_hal::<wgpu::hal::api::Vulkan>()
            .is_some_and(|d| d.enabled_device_extensions().contains(&extension))
    }
}
