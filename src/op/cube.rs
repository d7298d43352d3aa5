//! The CubeCL backend implementation: prepares the buffers and launches the kernel of
//! `rope-pool-kernels`. Covers every CubeCL runtime (wgpu/Vulkan/Metal/WebGPU, CUDA, ROCm, CPU);
//! the fusion-wrapped backend reaches it through the lazy path the extension macro generates.

use crate::common::cube::tuning;
use crate::common::pool_tensor::PoolTensor;
use crate::op::backend::{Outputs, QkNorm, RopePoolBackend, RopePoolInputs, no_rows};
use crate::op::rope::RopeFrequencies;
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Shape;
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use cubecl::server::MemoryLayoutDescriptor;
use rope_pool_kernels::common::fp8::FP8_VECTOR;
use rope_pool_kernels::rope::{
    QkNormArgs, RopePoolArgs, RopePoolGeometry, launch_append_max, launch_rope_pool,
};
use std::sync::Arc;

/// A contiguous tensor whose buffer this call owns: the input itself when nobody else holds it
/// (the in-place path), a copy otherwise, so no other holder ever sees the pool change.
fn owned_contiguous(tensor: CubeTensor) -> CubeTensor {
    let tensor = into_contiguous(tensor);
    if tensor.can_mut() {
        tensor
    } else {
        tensor.copy()
    }
}

/// `x` (`[T, H, D]`) as the kernel reads q, k and v: as is when each token's heads are one
/// dense run of `H * D` elements, whatever the distance between tokens (a view of one fused QKV
/// projection: no copy) as long as it is a multiple of `whole`, else a dense copy.
fn token_rows(x: CubeTensor, whole: usize) -> CubeTensor {
    let (shape, strides) = (x.meta.shape(), x.meta.strides());
    let dense_heads = strides[2] == 1 && (shape[1] <= 1 || strides[1] == shape[2]);
    let disjoint = shape[0] <= 1 || strides[0] >= shape[1] * shape[2];
    // The stride in whole vectors (fp8 calls read vectors of four whatever the stride).
    let aligned = shape[0] <= 1 || strides[0].is_multiple_of(whole);
    if dense_heads && disjoint && aligned {
        x
    } else {
        into_contiguous(x)
    }
}

/// Elements between the tokens of `x` (`[T, H, D]`, as [`token_rows`] leaves it).
fn token_stride(x: &CubeTensor) -> usize {
    let shape = x.meta.shape();
    if shape[0] <= 1 {
        shape[1] * shape[2]
    } else {
        x.meta.strides()[0]
    }
}

/// Fresh dense tensors of `shapes` in `like`'s dtype, each with a buffer of its `bytes`
/// elements, all in one allocation: one memory reservation and one device task however many.
fn empty_outputs<const N: usize>(
    like: &CubeTensor,
    outputs: [(Shape, usize); N],
) -> [CubeTensor; N] {
    let elem = like.dtype.size();
    let descriptors = outputs
        .iter()
        .map(|(_, elements)| MemoryLayoutDescriptor::contiguous([*elements].into(), elem))
        .collect();
    let mut layouts = like.client.empty_tensors(descriptors).into_iter();
    outputs.map(|(shape, _)| {
        let handle = layouts.next().expect("one layout per descriptor").memory;
        CubeTensor::new_contiguous(
            like.client.clone(),
            like.device.clone(),
            shape,
            handle,
            like.dtype,
        )
    })
}

/// The positions as the kernel reads them: flat, and for LongRoPE followed by their maximum (the
/// kernel picks the frequency set from it on the device, so no read-back).
fn kernel_positions(positions: CubeTensor, long_short: bool) -> CubeTensor {
    let positions = into_contiguous(positions);
    let len = positions.shape().num_elements();
    if !long_short {
        return positions;
    }
    let out = CubeTensor::new_contiguous(
        positions.client.clone(),
        positions.device.clone(),
        Shape::new([len + 1]),
        positions.client.empty((len + 1) * positions.dtype.size()),
        positions.dtype,
    );
    let client = positions.client.clone();
    let int = dtype_to_storage_type(positions.dtype);
    // Safety: both tensors are contiguous, of `len` and `len + 1` elements; `out` is fresh.
    unsafe {
        launch_append_max(
            &client,
            int,
            len,
            positions.into_tensor_arg(),
            out.clone().into_tensor_arg(),
        );
    }
    out
}

impl RopePoolBackend for CubeBackend {
    fn rope_pool_fused(
        inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
        qk_norm_eps: f32,
    ) -> Outputs<Self> {
        // fp8 pools fix the vector at four elements: a view's token stride must hold whole
        // vectors (any other call picks a vector that divides the strides).
        let whole = match inputs.k_pool.fp8_scale() {
            Some(_) => FP8_VECTOR,
            None => 1,
        };
        let (q, k, v) = (
            token_rows(inputs.q, whole),
            token_rows(inputs.k, whole),
            token_rows(inputs.v, whole),
        );
        let positions = kernel_positions(inputs.positions, rope.table.variant().long_short);
        let slots = into_contiguous(inputs.slots);
        let qk_norm = match inputs.qk_norm {
            QkNorm::None => None,
            QkNorm::Rms { q_weight, k_weight } => Some(QkNormArgs {
                q_weight: into_contiguous(q_weight).into_tensor_arg(),
                k_weight: into_contiguous(k_weight).into_tensor_arg(),
                eps: qk_norm_eps,
            }),
        };
        // The pools' buffers (fp8: their words) and the fp8 scales (validation pairs the kinds).
        let (k_pool, k_scale) = inputs.k_pool.into_stored();
        let (v_pool, v_scale) = inputs.v_pool.into_stored();
        let (k_pool, v_pool) = (owned_contiguous(k_pool), owned_contiguous(v_pool));
        let fp8_scales = k_scale.zip(v_scale);
        // Without k_rot the kernel never writes `k_out`: an empty `[0, Hkv, D]` output whose
        // buffer of one head row stands in for it (a binding may not be empty, and holds at
        // least one vector).
        let write_k_rot = k_rot;
        let k_rot = if write_k_rot {
            (k.shape(), k.shape().num_elements())
        } else {
            (no_rows(&k.shape()), k.shape()[2].max(1))
        };
        let [q_rot, k_rot] = empty_outputs(&q, [(q.shape(), q.shape().num_elements()), k_rot]);

        let geometry = RopePoolGeometry {
            token_strides: [token_stride(&q), token_stride(&k), token_stride(&v)],
            ..RopePoolGeometry::of(q.meta.shape(), k.meta.shape(), k_pool.meta.shape())
        };
        let client = q.client.clone();
        let float = dtype_to_storage_type(q.dtype);
        let int = dtype_to_storage_type(positions.dtype);
        // Safety: every tensor has the validated shape (norm weights `[D]`), dense except the
        // token strides of q, k and v the geometry carries; the pools and outputs are buffers this call owns, so none
        // aliases an input.
        unsafe {
            launch_rope_pool(
                &client,
                float,
                int,
                geometry,
                &rope.table,
                RopePoolArgs {
                    q: q.into_tensor_arg(),
                    k: k.into_tensor_arg(),
                    v: v.into_tensor_arg(),
                    positions: positions.into_tensor_arg(),
                    slots: slots.into_tensor_arg(),
                    q_out: q_rot.clone().into_tensor_arg(),
                    k_out: k_rot.clone().into_tensor_arg(),
                    k_pool: k_pool.clone().into_tensor_arg(),
                    v_pool: v_pool.clone().into_tensor_arg(),
                    write_k_out: write_k_rot,
                    qk_norm,
                    fp8_scales,
                },
                &tuning().rope,
            );
        }
        (
            q_rot,
            k_rot,
            PoolTensor::from_stored(k_pool, k_scale),
            PoolTensor::from_stored(v_pool, v_scale),
        )
    }
}
