//! The Flex (pure-Rust CPU) implementation: dense host buffers handed to [`crate::cpu`].

use crate::backend::{RopePoolBackend, RopePoolInputs, RopePoolOutputs, no_rows};
use crate::cpu::{self, Storage};
use crate::rope::RopeFrequencies;
use burn::backend::TensorMetadata;
use burn::tensor::{DType, Element};
use burn_flex::{Flex, FlexTensor, Layout};
use half::{bf16, f16};
use rope_pool_kernels::RopePoolGeometry;
use std::sync::Arc;

/// `tensor` with a dense row-major buffer of exactly its elements, starting at 0. Copies only
/// when the layout is not already that; a shared buffer stays shared (writers copy on write).
fn dense(tensor: FlexTensor) -> FlexTensor {
    let exact = tensor.layout().contiguous_offsets() == Some((0, tensor.layout().num_elements()))
        && tensor.bytes().len() == tensor.layout().num_elements() * tensor.dtype().size();
    if exact {
        tensor
    } else {
        tensor.to_contiguous()
    }
}

/// The values of an integer tensor (i32 or i64: the types the op hands the backend), widened to
/// i64.
fn indices(tensor: FlexTensor) -> Vec<i64> {
    dense(tensor).into_data().iter::<i64>().collect()
}

fn run<E: Storage + Element + bytemuck::Pod>(
    inputs: RopePoolInputs<Flex>,
    rope: &RopeFrequencies,
    k_rot: bool,
) -> RopePoolOutputs<Flex> {
    let RopePoolInputs {
        q,
        k,
        v,
        positions,
        slots,
        k_pool,
        v_pool,
    } = inputs;
    let (q, k, v) = (dense(q), dense(k), dense(v));
    let (mut k_pool, mut v_pool) = (dense(k_pool), dense(v_pool));
    let geometry = RopePoolGeometry::of(&q.shape(), &k.shape(), &k_pool.shape());
    let mut q_out = vec![E::from_f32(0.0); q.shape().num_elements()];
    let mut k_out = vec![E::from_f32(0.0); k.shape().num_elements()];
    cpu::rope_pool(
        geometry,
        rope,
        q.storage::<E>(),
        k.storage::<E>(),
        v.storage::<E>(),
        &indices(positions),
        &indices(slots),
        &mut q_out,
        &mut k_out,
        // Copy-on-write: a pool still held elsewhere is copied here, never changed under its
        // other holder.
        k_pool.storage_mut::<E>(),
        v_pool.storage_mut::<E>(),
    );
    let output = |values: Vec<E>, like: &FlexTensor| {
        FlexTensor::new(
            burn::tensor::Bytes::from_elems(values),
            Layout::contiguous(like.shape()),
            like.dtype(),
        )
    };
    // The host loop forms the rotated keys anyway (the pool rows copy them); without k_rot the
    // output is the empty `[0, Hkv, D]`.
    let k_rot = if k_rot {
        output(k_out, &k)
    } else {
        FlexTensor::new(
            burn::tensor::Bytes::from_elems(Vec::<E>::new()),
            Layout::contiguous(no_rows(&k.shape())),
            k.dtype(),
        )
    };
    RopePoolOutputs {
        q_rot: output(q_out, &q),
        k_rot,
        k_pool,
        v_pool,
    }
}

impl RopePoolBackend for Flex {
    fn rope_pool_fused(
        inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
    ) -> RopePoolOutputs<Self> {
        match inputs.q.dtype() {
            DType::F32 => run::<f32>(inputs, &rope, k_rot),
            DType::F16 => run::<f16>(inputs, &rope, k_rot),
            DType::BF16 => run::<bf16>(inputs, &rope, k_rot),
            dtype => panic!("rope_pool_fused: unsupported dtype {dtype:?} (validated upstream)"),
        }
    }
}
