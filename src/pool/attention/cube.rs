//! The CubeCL implementation: contiguous inputs, fresh outputs (and, for a split launch, the
//! scratch of partial results), then the kernels of `rope-pool-kernels`.

use crate::common::cube::tuning;
use crate::pool::attention::backend::{AttentionParams, AttentionTensors, PoolAttentionBackend};
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use rope_pool_kernels::attention::{
    AttentionArgs, AttentionGeometry, AttentionLaunch, AttentionScalars, launch_attention,
};

/// A fresh dense tensor of `shape` and `dtype` on `like`'s device, its buffer at least one
/// vector of the widest load (a binding is never empty, nor smaller than one vector).
fn empty(like: &CubeTensor, shape: Shape, dtype: DType) -> CubeTensor {
    let bytes = shape.num_elements().max(8) * dtype.size();
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        shape,
        like.client.empty(bytes),
        dtype,
    )
}

impl PoolAttentionBackend for CubeBackend {
    fn pool_attention(
        inputs: AttentionTensors<Self>,
        params: AttentionParams,
    ) -> (CubeTensor, CubeTensor) {
        let AttentionTensors {
            q,
            k_pool,
            v_pool,
            kv_indices,
            ranges,
        } = inputs;
        // The pools' buffers (fp8: their words) and the fp8 scales.
        let (k_pool, k_scale) = k_pool.into_stored();
        let (v_pool, v_scale) = v_pool.into_stored();
        let fp8_scales = k_scale.zip(v_scale);
        let [q, k_pool, v_pool, kv_indices, ranges] =
            [q, k_pool, v_pool, kv_indices, ranges].map(into_contiguous);
        let (qs, ps) = (q.shape(), k_pool.shape());
        let geometry = AttentionGeometry {
            num_tokens: qs[0],
            num_qo_heads: qs[1],
            num_kv_heads: ps[1],
            head_dim: qs[2],
            pool_size: ps[0],
            max_keys: params.max_keys,
            fp8_pools: fp8_scales.is_some(),
            min_query_rows: params.min_query_rows,
        };
        let out = empty(&q, qs.clone(), q.dtype);
        let lse = empty(&q, Shape::new([qs[0], qs[1]]), DType::F32);
        let mut knobs = tuning().attention;
        knobs.portable |= params.portable_kernel;
        knobs.query_tiles = params.query_tiles.or(knobs.query_tiles);
        knobs.head_tiles = params.head_tiles.or(knobs.head_tiles);
        knobs.fp8_decode = params.fp8_decode.or(knobs.fp8_decode);
        let float = dtype_to_storage_type(q.dtype);
        let launch = AttentionLaunch::tuned(&q.client, float, geometry, &knobs);
        #[cfg(feature = "tuning")]
        crate::common::cube::trace(|| {
            let properties = q.client.properties();
            format!(
                "pool_attention {float:?} {geometry:?}\n  -> {launch:?}\n  planes {}..{}, cmma {:?}",
                properties.hardware.plane_size_min,
                properties.hardware.plane_size_max,
                properties.features.matmul.cmma
            )
        });
        let chunks = if launch.chunks > 1 { launch.chunks } else { 0 };
        let part_out = empty(&q, Shape::new([chunks, qs[0], qs[1], qs[2]]), DType::F32);
        let part_lse = empty(&q, Shape::new([chunks, qs[0], qs[1]]), DType::F32);
        let client = q.client.clone();
        let scalars = AttentionScalars {
            sm_scale: params.sm_scale,
            soft_cap: params.soft_cap,
        };
        // Safety: every tensor is contiguous and of the contract's shape (checked by
        // `pool_attention`); `ranges` comes from the plan, inside `kv_indices`; the outputs and
        // scratch are fresh buffers.
        unsafe {
            launch_attention(&client, float, geometry, launch, scalars, || {
                AttentionArgs {
                    q: q.clone().into_tensor_arg(),
                    k_pool: k_pool.clone().into_tensor_arg(),
                    v_pool: v_pool.clone().into_tensor_arg(),
                    kv_indices: kv_indices.clone().into_tensor_arg(),
                    ranges: ranges.clone().into_tensor_arg(),
                    out: out.clone().into_tensor_arg(),
                    lse: lse.clone().into_tensor_arg(),
                    part_out: part_out.clone().into_tensor_arg(),
                    part_lse: part_lse.clone().into_tensor_arg(),
                    fp8_scales,
                }
            });
        }
        (out, lse)
    }
}
