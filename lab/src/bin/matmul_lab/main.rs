//! Times matrix-product kernels on the device, each first checked against the CPU: the
//! shipped ones, the ceilings beside this file, and any variant file given.
//! BENCHMARKS.md's kernel sweeps and ceilings come from it.
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin matmul_lab                  # shipped kernels, ceilings
//! cargo run --release -p vramkit-lab --bin matmul_lab -- variant.wgsl  # and a variant of your own
//! ```
//!
//! A variant's first line says what it is: `// lab: kind=coop tile_m=128 tile_n=128` (f16
//! inputs, eight halves per `vec4<u32>`, `c` f32; the lab declares the bindings, `GUARDED`,
//! `TILE_M`, `TILE_N` and `matmul_params.wgsl`), or `kind=f32` (`vec4<f32>` inputs; the
//! file declares `c`). For `kind=coop`, `in=pairs` binds the inputs as `vec2<f16>`,
//! `in=quads` as `vec4<f16>`, `in=half` as `f16` and `in=eight` as structs `Eight` of two `vec4<f16>` (so no
//! half passes through f32 on its way to workgroup memory), and `out=vec4` binds `c` as
//! `vec4<f32>`. `walk`: one workgroup per `LAB_TILES_PER_GROUP` tiles (default 1, as shipped)
//! on a 1-D grid, as the shipped matrix-unit kernel; otherwise one per tile on a 2-D grid
//! with `workgroup_id.z` the product. `nocheck`: time it without the CPU check (the
//! ceilings compute no product).
//!
//! `spirv`: the lab compiles the variant to SPIR-V itself and rewrites it (`spirv.rs`): all
//! its workgroup variables share one block (so a variant can lay views of one memory over
//! each other), `subgroupBarrier()` orders workgroup memory, and with `coop2=MxKxN` its
//! matrices become workgroup-scope matrices of those sizes (`tensor`: loaded through
//! tensor layouts). Such variants run only on a device that offers those extensions
//! (`spirv::open`); elsewhere they are validated and rewritten, not run. The variants in
//! `variants/` are the ones BENCHMARKS.md reports; `.ci/run` rewrites them on every run.
//! `LAB_SPIRV_DIR=dir` writes the rewritten words there.
//!
//! `LAB_LIBRARY=1` times f16 and f32 products through the library's own call instead, with
//! split-k on and off (`library.rs`).
//!
//! `LAB_STATS=1` first prints what the driver reports of each kernel it compiles (its
//! registers, ...; `driver_stats.rs`); `LAB_STATS=only` prints that and stops.
//! `LAB_KERNELS="name,..."` keeps the kernels whose names contain one of those words.
//! `LAB_SHAPES="m,n,k,batch;..."` sets the shapes (default 4096^3, 8192^3 and attention's
//! two products of 32 heads). Prints one `lab_<kernel>_<m>x<n>x<k>x<batch>_tflops: X` line
//! per kernel and shape (`lab/scripts/spread.py` reads them): GPU time from timestamp queries
//! around batches of about 30 ms, the median of five, after the clock has settled. Exits
//! with 1 if any checked kernel is wrong, and panics on WGSL that naga rejects.

use std::time::Instant;

#[cfg(vulkan_hal)]
mod driver_stats;
mod library;
mod spirv;

const F32_PREFIX: &str = "alias In4 = vec4<f32>;\n\
fn widen4(v: In4) -> vec4<f32> { return v; }\n\
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;\n\
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;\n";
/// The shipped kernels' parameters (`shaders/shared/matmul_params.wgsl`), bound at 0 as
/// every shipped matmul entry binds them.
const PARAMS: &str = concat!(
    include_str!("../../../../shaders/shared/matmul_params.wgsl"),
    "@group(0) @binding(0) var<uniform> params: Params;\n"
);

struct Kernel {
    name: String,
    coop: bool,
    tile: (u32, u32),
    walk: bool,
    check: bool,
    /// `spirv`: compiled by the lab, its SPIR-V rewritten so (`spirv.rs`).
    rewrite: Option<spirv::Rewrite>,
    /// The rewritten SPIR-V of each source, made when they are validated (`spirv` only).
    spirv_words: Vec<Vec<u32>>,
    /// The source for a shape of whole tiles, and for any other.
    source: [String; 2],
    /// Workgroup memory its sources declare (the larger), set when they are validated.
    workgroup_bytes: u32,
}

/// The WGSL of the shipped shader `name` (as `vramkit::SHADERS` names it).
fn shipped_source(name: &str) -> String {
    let shader = vramkit::SHADERS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("vramkit ships no shader named '{name}'"));
    shader.source().unwrap_or_else(|e| panic!("{e}"))
}

/// The shipped kernels, as the host runs them on read-only inputs.
fn shipped() -> Vec<Kernel> {
    vec![
        Kernel {
            name: "coop".into(),
            coop: true,
            tile: (128, 128),
            walk: true,
            check: true,
            rewrite: None,
            spirv_words: Vec::new(),
            source: [
                shipped_source("matmul_coop.wgsl (whole tiles, read-only inputs)"),
                shipped_source("matmul_coop.wgsl (read-only inputs)"),
            ],
            workgroup_bytes: 0,
        },
        Kernel {
            name: "f32_vec4".into(),
            coop: false,
            tile: (128, 128),
            walk: false,
            check: true,
            rewrite: None,
            spirv_words: Vec::new(),
            source: [0, 1].map(|_| shipped_source("matmul_vec4.wgsl (f32, read-only inputs)")),
            workgroup_bytes: 0,
        },
    ]
}

/// A variant file, with the declarations the lab adds before it.
fn variant(path: &str) -> Kernel {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let name = std::path::Path::new(path)
        .file_stem()
        .map_or("variant".into(), |s| {
            s.to_string_lossy().replace(['-', '.'], "_")
        });
    variant_text(&name, &text)
}

/// A variant `path` (a name in messages) of source `text` (its first line says what it is).
fn variant_text(path: &str, text: &str) -> Kernel {
    let head = text.lines().next().unwrap_or("");
    assert!(
        head.contains("lab:"),
        "{path}: the first line says `// lab: kind=...`"
    );
    let field = |key: &str| -> Option<u32> {
        head.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{path}: {key}={v}")))
    };
    let coop = head.contains("kind=coop");
    let tile = (
        field("tile_m").unwrap_or(128),
        field("tile_n").unwrap_or(128),
    );
    let input = if head.contains(" in=eight") {
        "struct Eight { lo: vec4<f16>, hi: vec4<f16> }\nalias Input = Eight;\n"
    } else if head.contains(" in=pairs") {
        "alias Input = vec2<f16>;\n"
    } else if head.contains(" in=half") {
        "alias Input = f16;\n"
    } else if head.contains(" in=quads") {
        "alias Input = vec4<f16>;\n"
    } else {
        "alias Input = vec4<u32>;\n"
    };
    let output = if head.contains(" out=vec4") {
        "vec4<f32>"
    } else {
        "f32"
    };
    let source = [false, true].map(|guarded| {
        let prefix = if coop {
            format!(
                "enable f16;\nenable wgpu_cooperative_matrix;\n{input}\
                 @group(0) @binding(1) var<storage, read> a: array<Input>;\n\
                 @group(0) @binding(2) var<storage, read> b: array<Input>;\n\
                 @group(0) @binding(3) var<storage, read_write> c: array<{output}>;\n\
                 const GUARDED: bool = {guarded};\n\
                 const TILE_M: u32 = {}u;\nconst TILE_N: u32 = {}u;\n",
                tile.0, tile.1
            )
        } else {
            F32_PREFIX.to_string()
        };
        format!("{prefix}{PARAMS}{text}")
    });
    Kernel {
        name: path.into(),
        coop,
        tile,
        walk: head.contains(" walk"),
        check: !head.contains("nocheck"),
        rewrite: head
            .contains(" spirv")
            .then(|| spirv::Rewrite::parse(head).unwrap_or_else(|e| panic!("{path}: {e}"))),
        spirv_words: Vec::new(),
        source,
        workgroup_bytes: 0,
    }
}

/// Parses and validates `source` with naga (every capability on), or panics with the error.
fn validate(name: &str, source: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    (module, info)
}

/// Small xorshift; values are multiples of 1/8 in [-1, 1], so every product and every f32
/// sum of them below 2^21 is exact and the check can ask for equality.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn value(&mut self) -> f32 {
        ((self.next() % 17) as f32 - 8.0) / 8.0
    }
}

fn main() {
    let shapes: Vec<[u32; 4]> = std::env::var("LAB_SHAPES")
        .unwrap_or_else(|_| {
            "4096,4096,4096,1;8192,8192,8192,1;2048,2048,128,32;2048,128,2048,32".into()
        })
        .split(';')
        .map(|s| {
            let v: Vec<u32> = s
                .split(',')
                .map(|x| x.trim().parse().expect("a number"))
                .collect();
            assert_eq!(v.len(), 4, "LAB_SHAPES: m,n,k,batch;...");
            [v[0], v[1], v[2], v[3]]
        })
        .collect();
    let per_group: u32 =
        std::env::var("LAB_TILES_PER_GROUP").map_or(1, |v| v.parse().expect("a number"));
    let mut kernels = shipped();
    kernels.push(variant_text(
        "coop_ceiling",
        include_str!("coop_ceiling.wgsl"),
    ));
    kernels.push(variant_text(
        "f32_ceiling",
        include_str!("f32_ceiling.wgsl"),
    ));
    kernels.extend(std::env::args().skip(1).map(|p| variant(&p)));
    // `LAB_KERNELS="coop,my_variant"`: run only kernels whose names contain one of these.
    if let Ok(only) = std::env::var("LAB_KERNELS") {
        kernels.retain(|k| only.split(',').any(|part| k.name.contains(part.trim())));
    }
    // Every source is validated first, also those this device cannot run (CI runs the
    // lab on lavapipe, which has no matrix units: the ceilings' WGSL is checked there).
    // `spirv` kernels are compiled and rewritten here too, once (so a rewrite that fails
    // stops the lab on every machine); their variables share one block, the largest.
    for kernel in &mut kernels {
        for (i, source) in kernel.source.iter().enumerate() {
            let (module, info) = validate(&kernel.name, source);
            let bytes = match &kernel.rewrite {
                None => vramkit::shaders::check::workgroup_bytes(&kernel.name, &module)
                    .map_err(|e| e.to_string()),
                Some(rewrite) => spirv::compile(&module, &info, Some(rewrite)).and_then(|words| {
                    lab_spirv::dump(&kernel.name, i, &words);
                    kernel.spirv_words.push(words);
                    spirv::shared_workgroup_bytes(&module)
                }),
            }
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
            kernel.workgroup_bytes = kernel.workgroup_bytes.max(bytes);
        }
        println!("# {}: valid WGSL", kernel.name);
    }
    if std::env::var("LAB_STATS").is_ok_and(|v| v != "0") {
        #[cfg(vulkan_hal)]
        driver_stats::print(
            &kernels
                .iter()
                .filter_map(|k| {
                    let words = match k.rewrite {
                        Some(_) => Ok(k.spirv_words[0].clone()),
                        None => {
                            let (module, info) = validate(&k.name, &k.source[0]);
                            spirv::compile(&module, &info, None)
                        }
                    };
                    match words {
                        Ok(words) => Some((k.name.clone(), words)),
                        Err(e) => {
                            println!("# {}: no SPIR-V ({e})", k.name);
                            None
                        }
                    }
                })
                .collect::<Vec<_>>(),
        );
        #[cfg(not(vulkan_hal))]
        println!("# driver statistics: Vulkan only");
        if std::env::var("LAB_STATS").as_deref() == Ok("only") {
            return;
        }
    }
    // `spirv` variants need a device with the extensions they use; where there is none
    // (lavapipe, other backends) they were validated and rewritten above, and stop there.
    let mut spirv_gpu = None;
    if kernels.iter().any(|k| k.rewrite.is_some()) {
        match lab_spirv::gpu(&mut kernels) {
            Ok(gpu) => spirv_gpu = Some(gpu),
            Err(why) => {
                println!("# `spirv` variants: rewritten, not run here ({why})");
                kernels.retain(|k| k.rewrite.is_none());
            }
        }
    }
    let gpu =
        spirv_gpu.unwrap_or_else(|| vramkit::Gpu::headless().unwrap_or_else(|e| panic!("{e}")));
    println!("device: {}", gpu.describe());
    if std::env::var("LAB_LIBRARY").is_ok_and(|v| v != "0") {
        library::run(&gpu, &shapes);
        return;
    }
    let limit = gpu.device().limits().max_compute_workgroup_storage_size;
    println!("# workgroup memory: {limit} bytes");
    if !gpu.has_matrix_units() {
        println!("# no matrix units here: the f16 kernels are validated, not run");
        kernels.retain(|k| !k.coop);
    }
    // A pipeline past the limit is a validation error that the timing loop would wait on
    // for ever (an H200 run of a 51 KiB variant hung until its timeout): refuse it here.
    for kernel in &kernels {
        assert!(
            kernel.workgroup_bytes <= limit,
            "{}: {} bytes of workgroup memory, the device allows {limit}",
            kernel.name,
            kernel.workgroup_bytes
        );
    }
    let (device, queue) = (gpu.device(), gpu.queue());
    let period = f64::from(queue.get_timestamp_period());
    let buffer = |size: u64, usage: wgpu::BufferUsages| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let upload = |data: &[u8]| {
        use wgpu::BufferUsages as U;
        let b = buffer(data.len() as u64, U::STORAGE | U::UNIFORM | U::COPY_DST);
        queue.write_buffer(&b, 0, data);
        b
    };
    let read = |src: &wgpu::Buffer, size: u64| -> Vec<u8> {
        let dst = buffer(
            size,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, &dst, 0, size);
        queue.submit([enc.finish()]);
        dst.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        let bytes = dst.slice(..).get_mapped_range().expect("mapped").to_vec();
        bytes
    };
    let queries = device.create_query_set(&wgpu::QuerySetDescriptor {
        label: None,
        ty: wgpu::QueryType::Timestamp,
        count: 2,
    });
    let stamps = buffer(
        16,
        wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
    );

    let mut any_wrong = false;
    for &[m, n, k, batch] in &shapes {
        let (mu, nu, ku, bu) = (m as usize, n as usize, k as usize, batch as usize);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(m * 31 + n * 7 + k));
        let av: Vec<f32> = (0..mu * ku * bu).map(|_| rng.value()).collect();
        let bv: Vec<f32> = (0..ku * nu * bu).map(|_| rng.value()).collect();
        let half =
            |v: &[f32]| -> Vec<half::f16> { v.iter().map(|&x| half::f16::from_f32(x)).collect() };
        let a16 = upload(bytemuck::cast_slice(&half(&av)));
        let b16 = upload(bytemuck::cast_slice(&half(&bv)));
        let a32 = upload(bytemuck::cast_slice(&av));
        let b32 = upload(bytemuck::cast_slice(&bv));
        let c_bytes = 4 * u64::from(m) * u64::from(n) * u64::from(batch);
        let c = buffer(
            c_bytes,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        );
        let shape = format!("{m}x{n}x{k}x{batch}");
        let flops = 2.0 * f64::from(m) * f64::from(n) * f64::from(k) * f64::from(batch);

        for kernel in &kernels {
            let (tm, tn) = kernel.tile;
            let whole = m % tm == 0 && n % tn == 0 && k % 32 == 0;
            // Strides in the units the kernel indexes: eight halves or four floats in,
            // floats or vec4s out.
            let (unit_in, unit_out) = if kernel.coop { (8, 1) } else { (4, 4) };
            let strides = |v: u32| if batch > 1 { v } else { 0 };
            let params: [u32; 8] = [
                m,
                n,
                k,
                strides(m * k / unit_in),
                strides(k * n / unit_in),
                strides(m * n / unit_out),
                batch,
                k,
            ];
            let uniform = upload(bytemuck::cast_slice(&params));
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(&kernel.name),
                source: wgpu::ShaderSource::Wgsl(
                    kernel.source[usize::from(!whole)].as_str().into(),
                ),
            };
            // SAFETY: a measuring tool; the shipped kernels are trusted as the library
            // trusts them, and every other kernel here is either checked against the CPU
            // below or marked as computing no product.
            let module = if kernel.rewrite.is_some() {
                lab_spirv::module(
                    device,
                    &kernel.name,
                    &kernel.spirv_words[usize::from(!whole)],
                )
            } else {
                unsafe {
                    device
                        .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                }
            };
            // Passthrough modules carry no reflection: their layout is given.
            let layout = kernel.rewrite.is_some().then(|| lab_spirv::layout(device));
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&kernel.name),
                layout: layout.as_ref(),
                module: &module,
                entry_point: Some("matmul"),
                compilation_options: Default::default(),
                cache: None,
            });
            let (a, b) = if kernel.coop {
                (&a16, &b16)
            } else {
                (&a32, &b32)
            };
            let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[&uniform, a, b, &c]
                    .iter()
                    .enumerate()
                    .map(|(i, buf)| wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: buf.as_entire_binding(),
                    })
                    .collect::<Vec<_>>(),
            });
            if let Some(e) = pollster::block_on(scope.pop()) {
                println!("# {} {shape}: {e}", kernel.name);
                continue;
            }
            let tiles = n.div_ceil(tn) * m.div_ceil(tm) * batch;
            let groups = if kernel.walk {
                (tiles.div_ceil(per_group), 1, 1)
            } else {
                (n.div_ceil(tn), m.div_ceil(tm), batch)
            };
            // Seconds of GPU time for `reps` dispatches in one pass.
            let run = |reps: u32| -> f64 {
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &queries,
                            beginning_of_pass_write_index: Some(0),
                            end_of_pass_write_index: Some(1),
                        }),
                    });
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &bind, &[]);
                    for _ in 0..reps {
                        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
                    }
                }
                enc.resolve_query_set(&queries, 0..2, &stamps, 0);
                queue.submit([enc.finish()]);
                let t: [u64; 2] = bytemuck::pod_read_unaligned(&read(&stamps, 16));
                t[1].wrapping_sub(t[0]) as f64 * period * 1e-9
            };
            let first = run(1);
            if kernel.check {
                let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read(&c, c_bytes));
                let mut pick = Rng(7 + u64::from(m));
                let wrong = (0..2048)
                    .filter(|_| {
                        let z = (pick.next() % u64::from(batch)) as usize;
                        let i = (pick.next() % u64::from(m)) as usize;
                        let j = (pick.next() % u64::from(n)) as usize;
                        let want: f64 = (0..ku)
                            .map(|p| {
                                f64::from(av[(z * mu + i) * ku + p])
                                    * f64::from(bv[(z * ku + p) * nu + j])
                            })
                            .sum();
                        f64::from(got[(z * mu + i) * nu + j]) != want
                    })
                    .count();
                if wrong > 0 {
                    println!(
                        "# {} {shape}: WRONG at {wrong} of 2048 sampled outputs",
                        kernel.name
                    );
                    println!("lab_{}_{shape}_wrong: {wrong}", kernel.name);
                    any_wrong = true;
                    continue;
                }
            }
            // Half a second of work (the clock falls during the check), then batches of
            // about 30 ms until three in a row agree within 2 % (at most 3 s), then five.
            let reps = |t: f64| ((0.03 / t.max(1e-6)) as u32).clamp(1, 200);
            let start = Instant::now();
            while start.elapsed().as_secs_f64() < 0.5 {
                run(reps(first));
            }
            let reps = reps(run(1));
            let start = Instant::now();
            let mut last: Vec<f64> = Vec::new();
            while start.elapsed().as_secs_f64() < 3.0 {
                last.push(run(reps));
                if let [.., x, y, z] = last[..] {
                    if x.max(y).max(z) / x.min(y).min(z) < 1.02 {
                        break;
                    }
                }
            }
            let mut times: Vec<f64> = (0..5).map(|_| run(reps)).collect();
            times.sort_by(f64::total_cmp);
            let tflops = |t: f64| flops * f64::from(reps) / t / 1e12;
            println!(
                "# {} {shape}: {:.1} TFLOP/s (five batches of {reps}: {:.1}-{:.1})",
                kernel.name,
                tflops(times[2]),
                tflops(times[4]),
                tflops(times[0])
            );
            println!(
                "lab_{}_{shape}_tflops: {:.1}",
                kernel.name,
                tflops(times[2])
            );
        }
    }
    if any_wrong {
        std::process::exit(1);
    }
}

/// The lab's side of `spirv.rs`: `spirv` kernels' device, modules and layout.
mod lab_spirv {
    use super::Kernel;

    /// `LAB_SPIRV_DIR=dir`: writes the words of source `i` of kernel `name` as
    /// `dir/<name>.<i>.spv`, to read.
    pub fn dump(name: &str, i: usize, words: &[u32]) {
        if let Ok(dir) = std::env::var("LAB_SPIRV_DIR") {
            let path = format!("{dir}/{name}.{i}.spv");
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            if let Err(e) = std::fs::create_dir_all(&dir).and(std::fs::write(&path, bytes)) {
                println!("# {path}: {e}");
            }
        }
    }

    /// The device `spirv` kernels need (`spirv::open`), as a `Gpu`, or why there is none.
    /// Variants with workgroup-scope matrices (`coop2=`) are dropped here where the device
    /// has no `VK_NV_cooperative_matrix2`.
    #[cfg(vulkan_hal)]
    pub fn gpu(kernels: &mut Vec<Kernel>) -> Result<vramkit::Gpu, String> {
        use super::spirv::{enabled, open, COOPMAT2, EXPLICIT_LAYOUT};
        let (adapter, device, queue) = open()?;
        if !device
            .features()
            .contains(wgpu::Features::PASSTHROUGH_SHADERS)
        {
            return Err("the device takes no passthrough shaders".into());
        }
        if !enabled(&device, EXPLICIT_LAYOUT) {
            return Err(format!("{EXPLICIT_LAYOUT:?} is not offered"));
        }
        if !enabled(&device, COOPMAT2) {
            kernels.retain(|k| {
                let keep = k.rewrite.is_none_or(|r| r.workgroup_matrices.is_none());
                if !keep {
                    println!("# {}: not run ({COOPMAT2:?} is not offered)", k.name);
                }
                keep
            });
        }
        Ok(vramkit::Gpu::from_wgpu_with_adapter(
            &adapter, device, queue,
        ))
    }

    #[cfg(not(vulkan_hal))]
    pub fn gpu(_: &mut Vec<Kernel>) -> Result<vramkit::Gpu, String> {
        Err("they need the Vulkan backend".into())
    }

    /// The passthrough module of a kernel's rewritten `words`.
    pub fn module(device: &wgpu::Device, name: &str, words: &[u32]) -> wgpu::ShaderModule {
        // Read on Metal only; the SPIR-V carries its own workgroup size.
        let entry = [wgpu::PassthroughShaderEntryPoint {
            name: "matmul".into(),
            workgroup_size: (128, 1, 1),
        }];
        // SAFETY: naga's SPIR-V of WGSL it validated, rewritten by `spirv.rs`; the device
        // was opened by `spirv::open` with the extensions those rewrites use, and every
        // product is checked against the CPU before it is timed.
        unsafe {
            device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                label: Some(name),
                entry_points: entry[..].into(),
                spirv: Some(words.into()),
                ..Default::default()
            })
        }
    }

    /// The bindings every kernel here has: the uniform parameters, a, b (read-only), c.
    pub fn layout(device: &wgpu::Device) -> wgpu::PipelineLayout {
        let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
        let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &[
                entry(0, wgpu::BufferBindingType::Uniform),
                entry(1, storage(true)),
                entry(2, storage(true)),
                entry(3, storage(false)),
            ],
        });
        device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&group)],
            immediate_size: 0,
        })
    }
}
