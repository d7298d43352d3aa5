//! CubeCL kernels of `burn-rope-pool`: rotary position embedding of q and k (NeoX or GPT-J pairs,
//! partial rotary, scaled frequencies, M-RoPE) fused with the scatter of k/v into a token-slot KV
//! pool. Depends on CubeCL alone, so the kernels can be launched, tested and compiled to WGSL,
//! SPIR-V, CUDA or Metal Shading Language without Burn.

pub mod act;
pub mod angle;
pub mod attention;
mod attention_launch;
pub mod attention_plane;
pub mod fp8;
mod launch;
pub mod matvec;
pub mod norm;
mod reduce;
pub mod rope_pool;
pub mod rope_pool_norm;
mod table;
mod tuning;

pub use act::launch_silu_mul;
pub use angle::{TURN_PARTS, host_angle, split_turns};
pub use attention_launch::{
    AttentionArgs, AttentionGeometry, AttentionKernel, AttentionLaunch, AttentionScalars,
    launch_attention,
};
pub use launch::{
    FP8_VECTOR, MAX_NORM_HEAD_DIM, QkNormArgs, RopePoolArgs, RopePoolGeometry, heads_per_unit,
    launch_append_max, launch_rope_pool, vector_size,
};
pub use matvec::{
    FEW_ROWS_MAX, MATVEC_MAX_ROWS, few_rows_fits, has_tiles, launch_few_rows, launch_matvec,
    matvec_fits,
};
pub use norm::launch_rms_norm;
pub use table::{RopeTable, RopeVariant};
pub use tuning::LaunchTuning;
