//! The CubeCL implementations: contiguous inputs, a fresh output, one launch each.

use crate::common::cube::tuning;
use crate::model::kernels::backend::{
    ActTensors, AddNormTensors, DecoderKernels, Fp8AddTensors, Fp8NormTensors, Fp8ProductTensors,
    MatvecAddTensors, MatvecNormTensors, MatvecTensors, NormTensors,
};
use crate::model::kernels::{
    MatmulRoutine, decoder_kernel_fits, staged_rows, staged_rows_fp8, tiles_product_on,
};
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use cubecl::prelude::TensorBinding;
use cubecl::{prelude::Scalar, tf32};
use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems, MatmulSetupError};
use cubek::matmul::strategy::Strategy;
use cubek::std::InputBinding;
use rope_pool_kernels::decoder::{
    MATVEC_MAX_ROWS, Residual, StagedRows, launch_dequantize_fp8, launch_few_rows, launch_matvec,
    launch_matvec_add, launch_matvec_fp8, launch_matvec_fp8_add, launch_matvec_fp8_norm,
    launch_matvec_norm, launch_rms_norm, launch_silu_mul, launch_tiles_product, matvec_fits,
    spirv_tiles,
};

/// A fresh contiguous tensor of `shape` in `like`'s dtype, on its device.
fn fresh(like: &CubeTensor, shape: Shape) -> CubeTensor {
    fresh_of(like, shape, like.dtype)
}

/// A fresh contiguous tensor of `shape` and `dtype` on `like`'s device.
fn fresh_of(like: &CubeTensor, shape: Shape, dtype: DType) -> CubeTensor {
    let bytes = shape.num_elements().max(8) * dtype.size();
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        shape,
        like.client.empty(bytes),
        dtype,
    )
}

/// RMSNorm of `x`'s rows (`[rows, hidden]`, weight `w [hidden]`) into a fresh output, or with
/// `residual = Some((y, sum))` of `x + y`, the sum written into `sum` (a fresh buffer of x's
/// shape; `y` of x's shape or the f32 shares `[shares, rows, hidden]` of a staged product): one
/// launch.
fn norm(
    x: CubeTensor,
    w: CubeTensor,
    eps: f32,
    residual: Option<(CubeTensor, CubeTensor)>,
) -> CubeTensor {
    let [x, w] = [x, w].map(into_contiguous);
    let shape = x.shape();
    let out = fresh(&x, shape.clone());
    let residual = residual.map(|(y, sum)| Residual {
        shares: shares_of(&y),
        y: into_contiguous(y).into_tensor_arg(),
        sum: sum.into_tensor_arg(),
    });
    // Safety: x [rows, hidden] and w [hidden] are contiguous and share a dtype, and y has x's
    // shape and dtype or is the f32 shares [shares, rows, hidden] (checked by `rms_norm` /
    // `add_rms_norm` / `add_rms_norm_shares`), contiguous; out (and sum) are fresh buffers of
    // x's shape.
    unsafe {
        launch_rms_norm(
            &x.client,
            dtype_to_storage_type(x.dtype),
            x.dtype.size(),
            shape[0],
            shape[1],
            eps,
            [x.clone(), w, out.clone()].map(|t| t.into_tensor_arg()),
            residual,
        );
    }
    out
}

/// The shares a product's output `y` holds: 1 for a plain `[rows, n]` output, `s` for the f32
/// shares `[s, rows, n]` of a staged product.
fn shares_of(y: &CubeTensor) -> usize {
    let shape = y.shape();
    match shape.num_dims() {
        3 => shape[0],
        _ => 1,
    }
}

/// `out = lhs · rhs` through cubek's `routine`, accumulated in f32 and written in `out`'s dtype;
/// an error when the routine refuses the problem or the device (nothing launched then).
fn launch_matmul(
    routine: &Strategy,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    out: &CubeTensor,
) -> Result<(), MatmulSetupError> {
    let storage = dtype_to_storage_type(lhs.dtype);
    let mut elems = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: storage,
        rhs: storage,
        out: dtype_to_storage_type(out.dtype),
    });
    cubek::matmul::launch::launch_ref(
        routine,
        &lhs.client,
        InputBinding::new(lhs.clone().binding(), storage),
        InputBinding::new(rhs.clone().binding(), storage),
        out.clone().binding(),
        &mut elems,
    )
}

/// Whether cubek's tensor-core routines (and Burn's matmul) would multiply `x`'s f32 values as
/// TF32 on its device: f32 inputs where the device supports the TF32 type.
fn f32_through_tf32(x: &CubeTensor) -> bool {
    x.dtype == DType::F32
        && x.client
            .properties()
            .supports_type(tf32::elem_type_native())
}

/// cubek's one-stage cyclic routine forced to 16 × 16 × 16 tensor-core tiles: a partition of
/// `pm × pn × pk` tiles a plane, a stage of `sm × sn` partitions (planes), partition buffering
/// `buffers` (1 or 2), the cube count spread over `sms` multiprocessors (0: flattened).
fn tile16_blueprint(
    x: &CubeTensor,
    [m, n, k]: [usize; 3],
    [pm, pn, pk, sm, sn, buffers, sms]: [u32; 7],
) -> Option<Strategy> {
    use cubek::matmul::multi_level::Strategy as MultiLevel;
    use cubek::matmul::multi_level::components::stage::PartitionBuffering;
    use cubek::matmul::multi_level::components::tile::TileMatmulKind;
    use cubek::matmul::multi_level::definition::{BatchMatmulBlueprint, TilingScheme};
    use cubek::matmul::routine::BlueprintStrategy::Forced;
    use cubek::std::MatrixLayout;
    use cubek::std::cube_count::{
        CubeCountStrategy, GlobalOrder, HypercubeBlueprint, SmAllocation,
    };
    let tiling_scheme = TilingScheme::builder()
        .with_tile_size((16, 16, 16).into())
        .with_partition_size((pm, pn, pk).into())
        .with_stage_size((sm, sn, 1).into())
        .build()
        .ok()?;
    let cube_count_strategy = match sms {
        0 => CubeCountStrategy::Flattened,
        num_sms => CubeCountStrategy::Sm {
            num_sms,
            sm_usage: SmAllocation::Exact,
            cubes_first: true,
        },
    };
    let hypercube_blueprint = HypercubeBlueprint::builder()
        .global_order(GlobalOrder::SwizzleRow(4))
        .cube_count_strategy(cube_count_strategy)
        .build();
    let (stage_m, stage_n) = (16 * pm * sm, 16 * pn * sn);
    let blueprint = BatchMatmulBlueprint {
        plane_dim: x.client.properties().hardware.plane_size_max,
        tile_matmul: TileMatmulKind::Cmma,
        tiling_scheme,
        swizzle_modes: Default::default(),
        partition_buffering: match buffers {
            2 => PartitionBuffering::Double,
            _ => PartitionBuffering::Single,
        },
        loading_precompute_strategy: Default::default(),
        reader_mode: Default::default(),
        load_flows: Default::default(),
        hypercube_blueprint,
        lhs_layout: MatrixLayout::RowMajor,
        rhs_layout: MatrixLayout::ColMajor,
        check_m_bounds: !m.is_multiple_of(stage_m as usize),
        check_n_bounds: !n.is_multiple_of(stage_n as usize),
        check_k_bounds: !k.is_multiple_of(16 * pk as usize),
    };
    Some(MultiLevel::SimpleCyclicCmma(Forced(blueprint)).into())
}

/// `simple-multi-rows` for f16 products of 2048 rows or more through CubeCL's SPIR-V compiler
/// on 16 × 16 × 16 tiles (`spirv_tiles`; where the tiles product does not take them: inner sizes
/// not a multiple of 64): 4 × 4 tiles a plane and 8 planes (a 256 × 128 stage) instead of cubek's inferred 2
/// × 8 tiles and 4 planes — 135–143 TFLOPS against 124–129 on the four Llama-3-8B projections
/// at m = 32768 on the H200 (`benches/NOTES.md`, 'Prefill stage on Vulkan'), every output row equal to Burn's
/// matmul. Only where it was measured: planes of 32, and shapes the stage divides (no bounds
/// checks: m a multiple of 256, n of 128, k of 32); other problems keep cubek's choice.
fn wide_stage(x: &CubeTensor, [m, n, k]: [usize; 3]) -> Option<Strategy> {
    let fits = x.dtype == DType::F16
        && m >= 2048
        && m.is_multiple_of(256)
        && n.is_multiple_of(128)
        && k.is_multiple_of(32)
        && spirv_tiles(&x.client);
    if !fits {
        return None;
    }
    // Benchmark builds: `ROPE_POOL_BLUEPRINT=pm,pn,pk/sm,sn/buffers/sms` replaces the shape
    // (a sweep of what cubek's inference does not try).
    let spec = tuning().decoder.blueprint.unwrap_or([4, 4, 2, 4, 2, 1, 0]);
    tile16_blueprint(x, [m, n, k], spec)
}

/// cubek's register-tiled routine (no tensor cores: f32 arithmetic throughout).
fn unit_routine() -> Strategy {
    use cubek::matmul::multi_level::Strategy as MultiLevel;
    use cubek::matmul::multi_level::routines::batch::simple_unit::SimpleUnitSelectionArgs;
    use cubek::matmul::routine::BlueprintStrategy::Inferred;
    MultiLevel::SimpleUnit(Inferred(SimpleUnitSelectionArgs::default())).into()
}

/// `x · w_tᵀ` (both contiguous, one dtype; `w_t [n, k]`) through `routine` (its index): the
/// crate's tensor-core product of many rows for [`MatmulRoutine::Tiles`] where it takes the
/// product (else the routine `MatmulRoutine::cubek_for_problem` names), a cubek routine, or
/// Burn's matmul where the routine refuses the problem or names none.
fn routine_product(x: CubeTensor, w_t: CubeTensor, routine: u32) -> CubeTensor {
    let (m, n) = (x.shape()[0], w_t.shape()[0]);
    let k = x.shape()[1];
    let out = fresh(&x, Shape::new([m, n]));
    let float = dtype_to_storage_type(x.dtype);
    let mut routine = MatmulRoutine::from_index(routine);
    if routine == MatmulRoutine::Tiles {
        let aligned = |t: &CubeTensor| t.handle.offset_start.unwrap_or(0).is_multiple_of(16);
        if w_t.dtype == x.dtype
            && aligned(&x)
            && aligned(&w_t)
            && let Some(access) = tiles_product_on(&x.client, float, [m, k, n])
        {
            // Safety: `tiles_product_on` checked `tiles_product_access` for [m, k, n] (f16); x [m, k] and w_t [n, k]
            // are contiguous (the callers made them so) f16 from 16-byte-aligned offsets; out
            // is a fresh contiguous [m, n] f16 buffer.
            unsafe {
                launch_tiles_product(
                    &out.client,
                    float,
                    [m, k, n],
                    access,
                    [&x.handle, &w_t.handle, &out.handle],
                );
            }
            return out;
        }
        routine = MatmulRoutine::cubek_for_problem(m, n, k);
    }
    // `[k, n]`, read column-major: the weight as stored, no copy.
    let mut rhs = w_t;
    rhs.meta.swap(0, 1);
    let dtype = x.dtype;
    // A named routine, unless it refuses the problem or the device (checked before anything
    // is launched); then, and for the heuristic routine, Burn's own matmul. f32 products
    // stay f32: where the device has TF32 tensor cores (CUDA), cubek runs f32 through them
    // (10-bit mantissa; `adjust_dtypes`, cubek-matmul 0.3.1
    // `src/multi_level/definition/blueprint.rs:88-104`), so they take register tiles instead.
    let strategy = match f32_through_tf32(&x) {
        true => Some(unit_routine()),
        false if routine == MatmulRoutine::SimpleCyclicMultiRows => {
            wide_stage(&x, [m, n, rhs.shape()[0]]).or(routine.strategy())
        }
        false => routine.strategy(),
    };
    let launched = match strategy {
        Some(strategy) => match launch_matmul(&strategy, &x, &rhs, &out) {
            Ok(()) => true,
            Err(_refusal) => {
                // Benchmark builds say so once per routine: a sweep must know what it timed.
                #[cfg(feature = "tuning")]
                {
                    use std::collections::HashSet;
                    static SAID: std::sync::Mutex<Option<HashSet<u32>>> =
                        std::sync::Mutex::new(None);
                    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
                    if said.get_or_insert_with(HashSet::new).insert(routine as u32) {
                        eprintln!(
                            "matmul routine {} refused (Burn's matmul runs instead): {_refusal:?}",
                            routine.name()
                        );
                    }
                }
                false
            }
        },
        None => false,
    };
    if !launched {
        burn_cubecl::kernel::matmul::matmul(x, rhs, Some(out.clone()), Default::default(), dtype)
            .expect("Burn's matmul has a routine for every dense problem");
    }
    out
}

/// The staged kernel's scratch buffer for its shares' partial sums (split-K): a fresh f32
/// buffer on x's device, `None` where it needs none.
fn staged_partials(x: &CubeTensor, staged: &StagedRows) -> Option<TensorBinding> {
    let len = staged.partials();
    (len > 0).then(|| {
        let handle = x.client.empty(len * DType::F32.size());
        let shape = Shape::new([len]);
        CubeTensor::new_contiguous(
            x.client.clone(),
            x.device.clone(),
            shape,
            handle,
            DType::F32,
        )
        .binding()
    })
}

/// The staged launch of a product of x's `m` rows into `n` columns in `shares` ≥ 2 shares, and a
/// fresh f32 buffer `[shares, m, n]` on x's device for them.
///
/// # Panics
/// Unless `staged` is that launch: `project_shares` / `project_fp8_shares` asked the same
/// question of the same device before enqueueing the op.
fn shares_target(
    x: &CubeTensor,
    staged: Option<StagedRows>,
    shares: u32,
    n: usize,
) -> (StagedRows, CubeTensor) {
    let staged = staged
        .filter(|s| s.shares() == shares as usize && shares > 1)
        .expect("the caller checked the staged launch and its shares");
    let shape = Shape::new([shares as usize, x.shape()[0], n]);
    (staged, fresh_of(x, shape, DType::F32))
}

/// [`DecoderKernels::fp8_product`]: the staged tensor-core kernel decoding the codes as it stages
/// them where it takes the product, the register-decoding kernel where the matrix-vector kernel
/// fits, else the weight decoded into x's dtype (one launch) and multiplied as a float weight.
fn fp8_product(
    inputs: Fp8ProductTensors<CubeBackend>,
    block_words: usize,
    nan_codes: bool,
    routine: u32,
) -> CubeTensor {
    let [x, codes, scales] = [inputs.x, inputs.codes, inputs.scales].map(into_contiguous);
    let (m, k, n) = (x.shape()[0], x.shape()[1], codes.shape()[0]);
    let float = dtype_to_storage_type(x.dtype);
    if let Some(staged) = staged_rows_fp8(&x.client, float, [m, k, n]) {
        let out = fresh(&x, Shape::new([m, n]));
        let partials = staged_partials(&x, &staged);
        let client = out.client.clone();
        let args = [x, codes, scales, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `staged_rows_fp8` checked the staged kernel's fit for these sizes and that it
        // takes fp8 codes; `Fp8Weight` keeps codes [n, k / 4] and scales [n, ceil(k / 4 /
        // block_words)] (block_words ≥ 1); all contiguous; out and the partials are fresh.
        unsafe {
            staged.launch_fp8(&client, float, args, block_words, nan_codes, partials);
        }
        return out;
    }
    if matvec_fits(&x.client, m) {
        let out = fresh(&x, Shape::new([m, n]));
        let args = [x, codes, scales, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `matvec_fits` holds; `Fp8Weight` keeps k a multiple of 4 (codes are [n, k /
        // 4]) and block_words ≥ 1; scales are [n, ceil(k / 4 / block_words)] f32; all
        // contiguous; out is a fresh [m, n] buffer.
        unsafe { launch_matvec_fp8(&out.client, float, m, k, n, block_words, nan_codes, args) };
        return out;
    }
    let w_t = fresh(&x, Shape::new([n, k]));
    let args = [codes, scales, w_t.clone()].map(|t| t.into_tensor_arg());
    // Safety: as above (k a multiple of 4, block_words ≥ 1, contiguous inputs); w_t is a fresh
    // [n, k] buffer of x's dtype.
    unsafe { launch_dequantize_fp8(&w_t.client, float, n, k, block_words, args) };
    match decoder_kernel_fits(&x.client, float, [m, k, n]) {
        true => <CubeBackend as DecoderKernels>::matvec(MatvecTensors { x, w_t }),
        false => routine_product(x, w_t, routine),
    }
}

impl DecoderKernels for CubeBackend {
    fn rms_norm(inputs: NormTensors<Self>, eps: f32) -> CubeTensor {
        norm(inputs.x, inputs.w, eps, None)
    }

    fn add_rms_norm(inputs: AddNormTensors<Self>, eps: f32) -> (CubeTensor, CubeTensor) {
        let sum = fresh(&inputs.x, inputs.x.shape());
        let out = norm(inputs.x, inputs.w, eps, Some((inputs.y, sum.clone())));
        (sum, out)
    }

    fn matvec(inputs: MatvecTensors<Self>) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let out = fresh(&x, Shape::new([m, n]));
        let float = dtype_to_storage_type(x.dtype);
        let client = out.client.clone();
        let staged = staged_rows(&client, float, [m, k, n]);
        let partials = staged.and_then(|s| staged_partials(&x, &s));
        let [x, w_t, o] = [x, w_t, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `project` checked `matvec_fits` (up to 16 rows), `few_rows_fits` (17 to 64)
        // or the staged kernel's fit for these sizes, matching inner sizes k ≥ 1 and one dtype;
        // x [m, k] and w_t [n, k] are contiguous; out and the partials are fresh buffers.
        unsafe {
            if let Some(staged) = staged {
                staged.launch(&client, float, [x, w_t, o], partials);
            } else if m <= MATVEC_MAX_ROWS {
                launch_matvec(&out.client, float, out.dtype.size(), m, k, n, x, w_t, o);
            } else {
                launch_few_rows(&out.client, float, m, k, n, x, w_t, o, &tuning().decoder);
            }
        }
        out
    }

    fn matvec_norm(inputs: MatvecNormTensors<Self>, eps: f32, silu: bool) -> CubeTensor {
        let [x, norm_w, w_t] = [inputs.x, inputs.norm_w, inputs.w_t].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let out = fresh(&x, Shape::new([m, n / (1 + silu as usize)]));
        let float = dtype_to_storage_type(x.dtype);
        let args = [x, norm_w, w_t, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `norm_project` checked `matvec_norm_fits` for these rows and `silu`, an even
        // `n` with `silu`, one dtype, the norm weight of length k ≥ 1; all contiguous; out is a
        // fresh buffer of the output's shape.
        unsafe {
            launch_matvec_norm(
                &out.client,
                float,
                out.dtype.size(),
                m,
                k,
                n,
                eps,
                silu,
                args,
            );
        }
        out
    }

    fn matvec_add(inputs: MatvecAddTensors<Self>) -> CubeTensor {
        let [x, w_t, residual] = [inputs.x, inputs.w_t, inputs.residual].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let out = fresh(&x, Shape::new([m, n]));
        let float = dtype_to_storage_type(x.dtype);
        let args = [x, w_t, residual, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `project_add` checked `matvec_fits` for these rows, one dtype, k ≥ 1 and the
        // residual's shape [m, n]; all contiguous; out is a fresh [m, n] buffer.
        unsafe { launch_matvec_add(&out.client, float, out.dtype.size(), m, k, n, args) };
        out
    }

    fn fp8_norm_product(
        inputs: Fp8NormTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        eps: f32,
        silu: bool,
    ) -> CubeTensor {
        let [x, norm_w, codes, scales] =
            [inputs.x, inputs.norm_w, inputs.codes, inputs.scales].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], codes.shape()[0]);
        let out = fresh(&x, Shape::new([m, n / (1 + silu as usize)]));
        let float = dtype_to_storage_type(x.dtype);
        let args = [x, norm_w, codes, scales, out.clone()].map(|t| t.into_tensor_arg());
        let block_words = block_words as usize;
        // Safety: `norm_project_fp8` checked `matvec_norm_fits` for these rows and `silu`, an
        // even `n` with `silu`, the norm weight of x's length and dtype; `Fp8Weight` keeps k a
        // multiple of 4 (codes [n, k / 4]) and block_words ≥ 1, scales [n, ceil(k / 4 /
        // block_words)] f32; all contiguous; out is a fresh buffer of the output's shape.
        unsafe {
            launch_matvec_fp8_norm(
                &out.client,
                float,
                m,
                k,
                n,
                block_words,
                nan_codes,
                eps,
                silu,
                args,
            );
        }
        out
    }

    fn fp8_product_add(
        inputs: Fp8AddTensors<Self>,
        block_words: u32,
        nan_codes: bool,
    ) -> CubeTensor {
        let [x, codes, scales, residual] =
            [inputs.x, inputs.codes, inputs.scales, inputs.residual].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], codes.shape()[0]);
        let out = fresh(&x, Shape::new([m, n]));
        let float = dtype_to_storage_type(x.dtype);
        let args = [x, codes, scales, residual, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `project_add_fp8` checked `matvec_fits` for these rows and the residual's
        // shape [m, n] and dtype; k, block_words and the scales as in `fp8_norm_product`; all
        // contiguous; out is a fresh [m, n] buffer.
        let block_words = block_words as usize;
        unsafe { launch_matvec_fp8_add(&out.client, float, m, k, n, block_words, nan_codes, args) };
        out
    }

    fn matmul(inputs: MatvecTensors<Self>, routine: u32) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        routine_product(x, w_t, routine)
    }

    fn fp8_product(
        inputs: Fp8ProductTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        routine: u32,
    ) -> CubeTensor {
        fp8_product(inputs, block_words as usize, nan_codes, routine)
    }

    fn silu_mul(inputs: ActTensors<Self>, dtype: DType) -> CubeTensor {
        let gate_up = into_contiguous(inputs.gate_up);
        let shares = shares_of(&gate_up);
        let shape = gate_up.shape();
        let (rows, width) = (shape[shape.num_dims() - 2], shape[shape.num_dims() - 1]);
        let out = fresh_of(&gate_up, Shape::new([rows, width / 2]), dtype);
        // Safety: gate_up [rows, 2m] of `dtype`, or its f32 shares [shares, rows, 2m], is
        // contiguous with an even width (checked by `silu_mul` / `silu_mul_shares`); out is a
        // fresh [rows, m] buffer.
        unsafe {
            launch_silu_mul(
                &gate_up.client,
                dtype_to_storage_type(dtype),
                dtype.size(),
                rows,
                width / 2,
                gate_up.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                shares,
            );
        }
        out
    }

    fn matvec_shares(inputs: MatvecTensors<Self>, shares: u32) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let float = dtype_to_storage_type(x.dtype);
        let (staged, out) = shares_target(&x, staged_rows(&x.client, float, [m, k, n]), shares, n);
        let client = out.client.clone();
        let args = [x, w_t, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: the staged kernel takes these sizes in `shares` ≥ 2 shares (checked above);
        // x [m, k] and w_t [n, k] are contiguous of one dtype; out is a fresh [shares, m, n]
        // f32 buffer.
        unsafe { staged.launch_shares(&client, float, args) };
        out
    }

    fn fp8_product_shares(
        inputs: Fp8ProductTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        shares: u32,
    ) -> CubeTensor {
        let [x, codes, scales] = [inputs.x, inputs.codes, inputs.scales].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], codes.shape()[0]);
        let float = dtype_to_storage_type(x.dtype);
        let staged_fp8 = staged_rows_fp8(&x.client, float, [m, k, n]);
        let (staged, out) = shares_target(&x, staged_fp8, shares, n);
        let client = out.client.clone();
        let args = [x, codes, scales, out.clone()].map(|t| t.into_tensor_arg());
        let block_words = block_words as usize;
        // Safety: as `fp8_product`'s staged launch, in `shares` ≥ 2 shares (checked above);
        // out is a fresh [shares, m, n] f32 buffer.
        unsafe { staged.launch_fp8_shares(&client, float, args, block_words, nan_codes) };
        out
    }
}
