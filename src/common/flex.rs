//! Flex (CPU) helpers every layer's host loop uses: the float storage types and dense buffers.

use burn_flex::FlexTensor;
use half::{bf16, f16};

/// A float storage type the host loops read and write; arithmetic is done in f32.
pub(crate) trait Storage: Copy + Send + Sync {
    fn to_f32(self) -> f32;
    fn from_f32(value: f32) -> Self;
}

impl Storage for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Storage for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Storage for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// `tensor` with a dense row-major buffer of exactly its elements, starting at 0. Copies only
/// when the layout is not already that; a shared buffer stays shared (writers copy on write).
pub(crate) fn dense(tensor: FlexTensor) -> FlexTensor {
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
pub(crate) fn indices(tensor: FlexTensor) -> Vec<i64> {
    dense(tensor).into_data().iter::<i64>().collect()
}
