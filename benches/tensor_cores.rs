//! What a device's tensor-core tiles (CubeCL's `cmma`: Vulkan's cooperative matrices, CUDA's
//! `wmma`) deliver, from the instruction up, beside the product kernels that feed them, in one
//! process on one device:
//!
//! - `registers`: each plane multiplies fragments it loaded once into `tm × tn` f32 (or f16)
//!   accumulators, `iters` times: the multiply-accumulate rate alone, by the accumulators a
//!   plane keeps in flight;
//! - `shared`: the cube stages an A block (`16·tm·pm` rows) and a B block (`16·tn·pn` rows, read
//!   column-major as the decoder reads a weight) of `16·tk` inner elements once in shared memory
//!   (vectors of 8 halves, rows padded by `pad`); every iteration each of the `pm × pn` planes
//!   loads its fragments of each inner tile from there (the tile rotating with the iteration) and
//!   multiplies them: the rate with a product's fragment loads, without global memory;
//! - products `x [m, k] · wᵀ` of random f16 values through the decoder's product of many rows
//!   (`rope_pool_kernels::decoder::launch_tiles_product`), its operands read and staged as
//!   16-byte words (`Words`, the normal launch) or as vectors of 8 halves (`Halves`, which
//!   SPIR-V splits into 8-byte accesses); 256 sampled outputs checked against float64 dot
//!   products.
//!
//! Every probe row checks its output (all inputs one value, so each element is known exactly).
//! TFLOPS (2·16³ flops a tile product) come from the wall time of 20 launches after a second of
//! launches (an idle GPU drops its clocks within a second; the warm-up also compiles the
//! pipeline), the device synchronised around them.
//!
//! `cargo bench --bench tensor_cores -- [--device vulkan] [--quick] [--products-only]`

use burn_rope_pool::testing::device_by_name;
use clap::Parser;
use cubecl::client::Client;
use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use rope_pool_kernels::common::fragment::{TILE, load_fragment, zero_accumulator};
use rope_pool_kernels::decoder::{TilesAccess, launch_tiles_product, tiles_product_access};
use std::time::Instant;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "default")]
    device: String,
    /// Fewer timed launches a row.
    #[arg(long)]
    quick: bool,
    /// The product rows only.
    #[arg(long)]
    products_only: bool,
    /// Cubes a launch (default: 8 a multiprocessor of 132).
    #[arg(long, default_value_t = 1056)]
    cubes: usize,
}

/// `count` 16 × 16 accumulators of zeros.
#[cube]
fn zeros<A: Float>(#[comptime] count: usize) -> Sequence<cmma::Matrix<A>> {
    let mut accs = Sequence::<cmma::Matrix<A>>::new();
    #[unroll]
    for _ in 0..count {
        accs.push(zero_accumulator::<A>());
    }
    accs
}

/// The `count` accumulators of plane `plane` stored into `out`, one 16 × 16 tile after another
/// from the plane's place (every cube writes the same values).
#[cube]
fn store_all<A: Float>(
    out: &mut Tensor<A>,
    accs: &Sequence<cmma::Matrix<A>>,
    plane: usize,
    #[comptime] count: usize,
) {
    let tile = TILE * TILE;
    #[unroll]
    for t in 0..count {
        let start = (plane * count + t) * tile;
        cmma::store(
            out.slice_mut(start, start + tile),
            accs.index(t),
            TILE as u32,
            cmma::MatrixLayout::RowMajor,
        );
    }
}

/// Fragments loaded once from `input`, multiplied `iters` times into `tm × tn` accumulators;
/// each accumulator stored into `out` at the plane's place (every cube writes the same values).
#[cube(launch_unchecked)]
fn registers_kernel<F: Float, A: Float>(
    input: &Tensor<F>,
    out: &mut Tensor<A>,
    iters: u32,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let tile = TILE * TILE;
    let mut a = Sequence::<cmma::Matrix<F>>::new();
    let mut b = Sequence::<cmma::Matrix<F>>::new();
    #[unroll]
    for i in 0..tm {
        a.push(load_fragment::<F, F>(
            cmma::MatrixIdent::A,
            cmma::MatrixLayout::RowMajor,
            input.slice(i * tile, (i + 1) * tile),
            TILE as u32,
        ));
    }
    #[unroll]
    for j in 0..tn {
        b.push(load_fragment::<F, F>(
            cmma::MatrixIdent::B,
            cmma::MatrixLayout::ColMajor,
            input.slice(j * tile, (j + 1) * tile),
            TILE as u32,
        ));
    }
    let accs = zeros::<A>(tm * tn);
    let mut it = 0u32;
    while it < iters {
        #[unroll]
        for i in 0..tm {
            #[unroll]
            for j in 0..tn {
                let acc = accs.index(i * tn + j);
                cmma::execute(a.index(i), b.index(j), acc, acc);
            }
        }
        it += 1;
    }
    store_all(out, &accs, UNIT_POS_Y as usize, tm * tn);
}

/// An A block of `16·tm·pm` rows and a B block of `16·tn·pn` rows, `16·tk` elements each, staged
/// once from `input` into shared memory (vectors of `N`, rows of `16·tk + pad` elements); each
/// iteration, each plane `(pi, pj)` loads its fragments of every inner tile from there and
/// multiplies them into its `tm × tn` accumulators.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn shared_kernel<F: Float, A: Float, N: Size>(
    input: &Tensor<Vector<F, N>>,
    out: &mut Tensor<A>,
    iters: u32,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] tk: usize,
    #[comptime] pm: usize,
    #[comptime] pn: usize,
    #[comptime] pad: usize,
    #[comptime] vector: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let ld = TILE * tk + pad;
    let ldv = ld / vector;
    let row_vectors = TILE * tk / vector;
    let a_rows = TILE * tm * pm;
    let b_rows = TILE * tn * pn;
    let mut a_s = Shared::<[Vector<F, N>]>::new_aligned_slice(a_rows * ldv, 16usize);
    let mut b_s = Shared::<[Vector<F, N>]>::new_aligned_slice(b_rows * ldv, 16usize);
    let units = CUBE_DIM as usize;
    let mut i = UNIT_POS as usize;
    while i < a_rows * row_vectors {
        a_s[(i / row_vectors) * ldv + i % row_vectors] = input[i % input.len()];
        i += units;
    }
    i = UNIT_POS as usize;
    while i < b_rows * row_vectors {
        b_s[(i / row_vectors) * ldv + i % row_vectors] = input[i % input.len()];
        i += units;
    }
    sync_cube();
    let plane = UNIT_POS_Y as usize;
    let (pi, pj) = (plane / pn, plane % pn);
    let accs = zeros::<A>(tm * tn);
    let tile_vectors = TILE / vector;
    let mut it = 0u32;
    while it < iters {
        #[unroll]
        for tt in 0..tk {
            // The inner tile rotates with the iteration, so no load is the same twice in a row.
            let t = (tt + it as usize) % tk;
            let mut b = Sequence::<cmma::Matrix<F>>::new();
            #[unroll]
            for j in 0..tn {
                let b0 = ((pj * tn + j) * TILE) * ldv + t * tile_vectors;
                b.push(load_fragment::<F, Vector<F, N>>(
                    cmma::MatrixIdent::B,
                    cmma::MatrixLayout::ColMajor,
                    b_s.slice(b0, b0 + (TILE - 1) * ldv + tile_vectors),
                    ld as u32,
                ));
            }
            #[unroll]
            for i in 0..tm {
                let a0 = ((pi * tm + i) * TILE) * ldv + t * tile_vectors;
                let f = load_fragment::<F, Vector<F, N>>(
                    cmma::MatrixIdent::A,
                    cmma::MatrixLayout::RowMajor,
                    a_s.slice(a0, a0 + (TILE - 1) * ldv + tile_vectors),
                    ld as u32,
                );
                #[unroll]
                for j in 0..tn {
                    let acc = accs.index(i * tn + j);
                    cmma::execute(&f, b.index(j), acc, acc);
                }
            }
        }
        it += 1;
    }
    store_all(out, &accs, plane, tm * tn);
}

/// One probe row: which kernel, its tiles and planes.
#[derive(Clone, Copy, Debug)]
enum Probe {
    Registers {
        tm: usize,
        tn: usize,
        planes: usize,
    },
    Shared {
        tm: usize,
        tn: usize,
        tk: usize,
        pm: usize,
        pn: usize,
        pad: usize,
    },
}

impl Probe {
    fn planes(self) -> usize {
        match self {
            Probe::Registers { planes, .. } => planes,
            Probe::Shared { pm, pn, .. } => pm * pn,
        }
    }

    /// Tile products a plane does in one iteration.
    fn products(self) -> usize {
        match self {
            Probe::Registers { tm, tn, .. } => tm * tn,
            Probe::Shared { tm, tn, tk, .. } => tm * tn * tk,
        }
    }

    fn accumulators(self) -> usize {
        match self {
            Probe::Registers { tm, tn, .. } | Probe::Shared { tm, tn, .. } => tm * tn,
        }
    }

    fn label(self) -> String {
        match self {
            Probe::Registers { tm, tn, planes } => {
                format!("registers {tm}×{tn} accumulators, {planes} planes")
            }
            Probe::Shared {
                tm,
                tn,
                tk,
                pm,
                pn,
                pad,
            } => format!("shared {tm}×{tn} a plane, {tk} inner tiles, {pm}×{pn} planes, pad {pad}"),
        }
    }
}

/// One product's random f16 operands, on the host and on the device.
struct Problem {
    shape: [usize; 3],
    xs: Vec<half::f16>,
    ws: Vec<half::f16>,
    x: cubecl::server::Handle,
    w: cubecl::server::Handle,
}

impl Problem {
    fn new(client: &Client, shape: [usize; 3]) -> Self {
        let [m, n, k] = shape;
        let mut rng = burn_rope_pool::testing::Rng::new(7);
        let mut random = |len: usize| -> Vec<half::f16> {
            (0..len)
                .map(|_| half::f16::from_f64(rng.value() * 0.5))
                .collect()
        };
        let (xs, ws) = (random(m * k), random(n * k));
        let x = client.create_from_slice(bytemuck::cast_slice(&xs));
        let w = client.create_from_slice(bytemuck::cast_slice(&ws));
        Problem {
            shape,
            xs,
            ws,
            x,
            w,
        }
    }
}

/// Launches `launch` for a second (the device's clocks ramp up from idle, and its pipeline is
/// compiled), then times `launches` launches; seconds a launch.
fn timed(client: &Client, launch: impl Fn(), launches: usize) -> f64 {
    let sync = || futures_lite::future::block_on(client.sync()).expect("device sync");
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 1.0 {
        launch();
        sync();
    }
    let start = Instant::now();
    for _ in 0..launches {
        launch();
    }
    sync();
    start.elapsed().as_secs_f64() / launches as f64
}

/// Times the decoder's product of many rows (read as `g` says) on `x [m, k] · wᵀ` (`w [n, k]`)
/// of random f16 values: seconds a launch and the largest error of 256 sampled outputs against their float64 dot products, relative to
/// the sum of the products' magnitudes (f16 rounding of the output: ≤ 2⁻¹¹).
fn run_product(client: &Client, g: TilesAccess, p: &Problem, launches: usize) -> (f64, f64) {
    let ([m, n, k], xs, ws, x, w) = (p.shape, &p.xs, &p.ws, &p.x, &p.w);
    let out = client.empty(m * n * 2);
    // Safety: `main` checked `tiles_product_access`; x, w and out are fresh buffers of f16
    // [m, k], [n, k] and [m, n].
    let launch = || unsafe {
        launch_tiles_product(client, float_type(true), [m, k, n], g, [x, w, &out]);
    };
    let seconds = timed(client, launch, launches);
    let bytes = client.read_one(out).expect("read the output");
    let got = bytemuck::cast_slice::<u8, half::f16>(&bytes);
    let mut worst = 0f64;
    for s in 0..256 {
        let (row, col) = ((s * 7919 + 13) % m, (s * 104729 + 5) % n);
        let (mut dot, mut mag) = (0f64, 0f64);
        for i in 0..k {
            let p = xs[row * k + i].to_f64() * ws[col * k + i].to_f64();
            dot += p;
            mag += p.abs();
        }
        worst = worst.max((got[row * n + col].to_f64() - dot).abs() / mag.max(1e-30));
    }
    (seconds, worst)
}

fn float_type(half: bool) -> ElemType {
    ElemType::Float(if half { FloatKind::F16 } else { FloatKind::F32 })
}

/// Launches `probe` `launches` times with `iters` iterations; returns the seconds of one launch
/// (device synchronised before and after) and the first output element.
fn run(
    client: &Client,
    probe: Probe,
    half_acc: bool,
    cubes: usize,
    iters: u32,
    launches: usize,
    value: f32,
) -> (f64, f32) {
    let tile = TILE * TILE;
    let inputs: Vec<half::f16> = vec![half::f16::from_f32(value); 16 * tile];
    let input = client.create_from_slice(bytemuck::cast_slice(&inputs));
    let planes = probe.planes();
    let out_elems = planes * probe.accumulators() * tile;
    let acc_size = if half_acc { 2 } else { 4 };
    let out = client.empty(out_elems * acc_size);
    let (f, a) = (float_type(true), float_type(half_acc));
    let cube_dim = CubeDim::new_2d(32, planes as u32);
    let launch = || unsafe {
        let input_arg = TensorArg::from_raw_parts(input.clone(), [1].into(), [inputs.len()].into());
        let out_arg = TensorArg::from_raw_parts(out.clone(), [1].into(), [out_elems].into());
        let count = CubeCount::Static(cubes as u32, 1, 1);
        match probe {
            Probe::Registers { tm, tn, .. } => registers_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                input_arg,
                out_arg,
                iters,
                tm,
                tn,
                [f, a],
            ),
            Probe::Shared {
                tm,
                tn,
                tk,
                pm,
                pn,
                pad,
            } => {
                let vector = 8;
                let input_arg = TensorArg::from_raw_parts(
                    input.clone(),
                    [1].into(),
                    [inputs.len() / vector].into(),
                );
                shared_kernel::launch_unchecked(
                    client,
                    count,
                    cube_dim,
                    vector,
                    input_arg,
                    out_arg,
                    iters,
                    tm,
                    tn,
                    tk,
                    pm,
                    pn,
                    pad,
                    vector,
                    [f, a],
                )
            }
        }
    };
    let seconds = timed(client, launch, launches);
    let bytes = client.read_one(out).expect("read the output");
    let first = if half_acc {
        bytemuck::cast_slice::<u8, half::f16>(&bytes)[0].to_f32()
    } else {
        bytemuck::cast_slice::<u8, f32>(&bytes)[0]
    };
    (seconds, first)
}

fn main() {
    let args = Args::parse();
    let device = match device_by_name(&args.device) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("tensor_cores: {e}: nothing measured");
            std::process::exit(2);
        }
    };
    let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch() else {
        eprintln!(
            "tensor_cores: `{}` is not a CubeCL device: nothing to probe",
            args.device
        );
        std::process::exit(2);
    };
    let client = cube.client();
    let props = client.properties();
    println!("device {device:?}");
    let tiles = |cd: ElemType| MmaConfig {
        a_type: float_type(true),
        b_type: float_type(true),
        cd_type: cd,
        m: 16,
        n: 16,
        k: 16,
    };
    let f32_acc = props
        .features
        .matmul
        .cmma
        .contains(&tiles(float_type(false)));
    let f16_acc = props
        .features
        .matmul
        .cmma
        .contains(&tiles(float_type(true)));
    println!("16×16×16 f16 tiles: f32 accumulators {f32_acc}, f16 accumulators {f16_acc}");
    if !f32_acc {
        eprintln!("tensor_cores: the device lists no 16×16×16 f16 → f32 tiles: nothing measured");
        std::process::exit(2);
    }
    let launches = if args.quick { 5 } else { 20 };
    let mut probes = vec![];
    for (tm, tn) in [(1, 1), (1, 2), (2, 2), (2, 4), (4, 4)] {
        probes.push((Probe::Registers { tm, tn, planes: 4 }, false));
    }
    probes.push((
        Probe::Registers {
            tm: 2,
            tn: 4,
            planes: 8,
        },
        false,
    ));
    if f16_acc {
        probes.push((
            Probe::Registers {
                tm: 2,
                tn: 4,
                planes: 4,
            },
            true,
        ));
    }
    for pad in [0, 8] {
        // cubek's shipped prefill stage: 4 × 4 tiles a plane, 2 inner tiles, 4 × 2 planes.
        probes.push((
            Probe::Shared {
                tm: 4,
                tn: 4,
                tk: 2,
                pm: 4,
                pn: 2,
                pad,
            },
            false,
        ));
    }
    for (tm, tn, tk, pm, pn) in [
        (2, 2, 2, 2, 2),
        (2, 4, 2, 2, 2),
        (4, 2, 4, 2, 2),
        (1, 1, 4, 1, 4),
    ] {
        probes.push((
            Probe::Shared {
                tm,
                tn,
                tk,
                pm,
                pn,
                pad: 8,
            },
            false,
        ));
    }
    println!(
        "| probe | accumulators | TFLOPS | µs a launch | output (expected) |\n| --- | --- | ---: | ---: | --- |"
    );
    let value = 0.125f32;
    if args.products_only {
        probes.clear();
    }
    for (probe, half_acc) in probes {
        let per_iter = probe.products() as f64 * (2 * TILE * TILE * TILE) as f64;
        let flops_per_iter = per_iter * (probe.planes() * args.cubes) as f64;
        // First a short launch to size ~10 ms launches from its rate.
        let (t, _) = run(&client, probe, half_acc, args.cubes, 256, 1, value);
        let iters = ((0.01 / t.max(1e-6)) * 256.0).clamp(256.0, 1e6) as u32;
        let iters = iters.min(if half_acc { 2048 } else { u32::MAX });
        let (seconds, first) = run(&client, probe, half_acc, args.cubes, iters, launches, value);
        let inner = match probe {
            Probe::Registers { .. } => 1,
            Probe::Shared { tk, .. } => tk,
        };
        let expected = iters as f32 * (inner * TILE) as f32 * value * value;
        let tflops = flops_per_iter * iters as f64 / seconds / 1e12;
        println!(
            "| {} | {} | {tflops:.1} | {:.0} | {first} ({expected}){} |",
            probe.label(),
            if half_acc { "f16" } else { "f32" },
            seconds * 1e6,
            if (first - expected).abs() <= expected * 1e-3 {
                ""
            } else {
                " WRONG"
            },
        );
    }
    println!(
        "\n| product m, n, k | launch | TFLOPS | µs a launch | sampled error |\n| --- | --- | ---: | ---: | ---: |"
    );
    let configs = [TilesAccess::Halves, TilesAccess::Words];
    let shapes = [[8192, 8192, 8192], [32768, 28672, 4096], [320, 256, 512]];
    for shape in shapes {
        let problem = Problem::new(&client, shape);
        for g in configs {
            let [m, n, k] = shape;
            if tiles_product_access(&client, float_type(true), [m, k, n]).is_none() {
                println!("| {m}, {n}, {k} | {g:?} | not taken on this device | | |");
                continue;
            }
            let (seconds, error) = run_product(&client, g, &problem, launches);
            let tflops = 2.0 * (m * n * k) as f64 / seconds / 1e12;
            println!(
                "| {m}, {n}, {k} | {g:?} | {tflops:.1} | {:.0} | {error:.1e}{} |",
                seconds * 1e6,
                if error <= 1e-3 { "" } else { " WRONG" },
            );
        }
    }
}
