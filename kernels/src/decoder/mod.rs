//! The model's room (`src/model/kernels` of the root crate): the decoder's own kernels for a
//! decode step, besides the fused op and the attention.
//!
//! - `matvec.rs`: matrix-vector products for up to 16 rows (one plane per output column; the
//!   norm before a projection and the activation or residual add after it fused in where a
//!   decode step has them) and tensor-core tiles for up to 64 (the staged kernel from 5 rows,
//!   fp8 weights included), each reading the weight once;
//! - `product.rs`: the product of many rows (prefill) on tensor-core tiles, staged through
//!   shared memory as 16-byte words, where CubeCL reaches the tiles through Vulkan;
//! - `norm.rs`: RMSNorm of rows, and the residual add fused with it;
//! - `fp8.rs`: the matrix-vector products on fp8 weights (e4m3 codes with block scales), decoded
//!   in registers, and the decoding of such a weight for the products no kernel here takes;
//! - `fp8_mma.rs`: the same products on fp8 weights for up to 8 rows on warp-level tensor-core
//!   products (CUDA), each code's f16 half the operand itself (a launch knob, off by default);
//! - `warp_rows.rs`: the staged kernel's float products on warp-level tensor-core products
//!   (CUDA), the weight loaded straight into registers (a launch knob, off by default);
//! - `act.rs`: the MLP activation, SiLU of the gate times the up projection;
//! - `launch.rs`: the host side — which product fits a device, the launches and the room's
//!   knobs ([`DecoderTuning`]).

mod act;
mod fp8;
mod fp8_mma;
mod launch;
mod matvec;
mod norm;
mod product;
mod warp_rows;

pub use crate::common::launch::has_tiles;
pub use launch::{
    DecoderTuning, MATVEC_MAX_ROWS, NORM_FUSED_MAX_ROWS, Residual, StagedRows, TilesAccess,
    few_rows_fits, fp8_mma_takes, launch_dequantize_fp8, launch_few_rows, launch_matvec,
    launch_matvec_add, launch_matvec_fp8, launch_matvec_fp8_add, launch_matvec_fp8_norm,
    launch_matvec_norm, launch_rms_norm, launch_silu_mul, launch_tiles_product, matvec_fits,
    matvec_norm_fits, spirv_tiles, tiles_product_access,
};
