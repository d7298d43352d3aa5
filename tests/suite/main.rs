//! The integration tests, linked into one binary (each module used to be its own test binary:
//! a dozen copies of burn + wgpu to link, which cost CI minutes and gigabytes of disk).

#![allow(clippy::single_range_in_vec_init)] // `slice([a..b])` slices the first axis

mod attention;
mod autodiff;
mod common;
mod engine;
mod errors;
mod fp8;
mod fuzz;
mod generate;
mod golden;
mod hf_configs;
#[cfg(feature = "server")]
mod http;
mod kv_pool;
mod model_fuzz;
mod parallel;
mod pool_attention;
mod pools;
mod properties;
mod qk_norm;
mod sampling;
#[cfg(feature = "server")]
mod serve;
#[cfg(feature = "server")]
mod serve_load;
mod soak;
mod text;
