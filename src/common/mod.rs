//! What every layer builds on, below the op: the pool tensor type the op writes and attention
//! reads ([`PoolTensor`]), the CubeCL launches' knobs and the Flex host loops' helpers.

#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "flex")]
pub(crate) mod flex;
pub(crate) mod pool_tensor;

pub use pool_tensor::{Fp8PoolError, PoolTensor};
pub(crate) use pool_tensor::{check_fp8_settings, check_pool_kinds};
