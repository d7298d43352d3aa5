//! The pool's room (`src/pool/attention` of the root crate): attention of query rows over the
//! token-slot pool rows that `kv_indices` names, with no gather, float or fp8 pools.
//!
//! - `plane.rs`: the kernel for devices with plane (warp / subgroup) operations, the one decode
//!   runs on;
//! - `portable.rs`: the kernel for devices without them (also run anywhere on request:
//!   [`AttentionTuning::portable`]);
//! - `tiles.rs`: the query-tile kernel for prefill (many rows of a sequence per cube sharing each
//!   key and value tile; tensor-core products where the device has them);
//! - `flash.rs`: the query tiles of prefill on warp-level tensor-core products through CUDA,
//!   scores, weights and running output in registers (flash attention 2's form;
//!   [`AttentionTuning::flash`]);
//! - `heads.rs`: the head-tile kernel, f16 decode's through CUDA (a GQA group's heads as the
//!   rows of warp-level tensor-core products; [`AttentionTuning::head_tiles`] refuses it);
//! - `split.rs`: the split of long contexts shared by both (each cube's share, the merge of the
//!   chunks);
//! - `launch.rs`: the host side — which kernel and what shape ([`AttentionLaunch`]), the
//!   launches and the room's knobs ([`AttentionTuning`]).

mod flash;
mod heads;
mod launch;
mod plane;
mod portable;
mod split;
mod tiles;

pub use launch::{
    AttentionArgs, AttentionGeometry, AttentionLaunch, AttentionScalars, AttentionTuning,
    launch_attention,
};
