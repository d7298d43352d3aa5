//! The op's room (`src/op` of the root crate): rotary position embedding of q and k (NeoX or
//! GPT-J pairs, partial rotary, scaled frequencies, LongRoPE, M-RoPE), optionally after a
//! per-head RMSNorm, fused with the scatter of k/v into the token-slot KV pool.
//!
//! - `kernel.rs`: the fused kernel, and the append of LongRoPE's largest position;
//! - `norm.rs`: the fused kernel with the q/k norm (Qwen3);
//! - `angle.rs`: exact angles in f32 arithmetic, with their host twin;
//! - `table.rs`: what the kernel knows of a call's RoPE ([`RopeVariant`], [`RopeTable`]);
//! - `launch.rs`: the host side — geometry, vector width, heads per unit, the table's device
//!   copy, the launches and the room's knobs ([`RopeTuning`]).

mod angle;
mod kernel;
mod launch;
mod norm;
mod table;

pub use angle::{host_angle, split_turns};
pub use kernel::rope_pool_kernel;
pub use launch::{
    MAX_NORM_HEAD_DIM, QkNormArgs, RopePoolArgs, RopePoolGeometry, RopeTuning, heads_per_unit,
    launch_append_max, launch_rope_pool,
};
pub use table::{RopeTable, RopeVariant};
