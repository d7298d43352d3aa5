//! The parameters of one `rope_pool_fused` call: what the user sets.

use crate::op::RopePoolError;
use crate::op::rope::{MRope, RopeFrequencies, RopeScaling, RopeStyle, scaled};
use burn::config::Config;
use burn::tensor::DType;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Parameters of [`rope_pool_fused`](crate::rope_pool_fused): the head geometry the tensors must
/// have, the RoPE variant (base θ, pair style, rotary dimension, frequency scaling, M-RoPE), and
/// whether slots are checked on the host before the launch. A model's settings come in one line
/// from its `config.json` ([`RopePoolConfig::from_hf_config`]).
///
/// ```
/// use burn_rope_pool::{RopePoolConfig, RopeScaling, RopeStyle};
/// // Llama-3-8B: 32 query heads, 8 kv heads, head_dim 128, θ = 500000.
/// let config = RopePoolConfig::new(128, 32, 8).with_rope_base(500_000.0);
/// assert_eq!(config.rotary_dim(), 128);
/// // GPT-J-6B: interleaved pairs over the first 64 of 256 elements.
/// let gptj = RopePoolConfig::new(256, 16, 16)
///     .with_style(RopeStyle::Gptj)
///     .with_rotary_dim(Some(64));
/// // Llama-2 with linear position interpolation.
/// let linear = RopePoolConfig::new(128, 32, 32).with_scaling(RopeScaling::Linear { factor: 4.0 });
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct RopePoolConfig {
    /// Elements per head; even.
    pub head_dim: usize,
    /// Query (and output) heads per token.
    pub num_qo_heads: usize,
    /// Key/value heads per token (equal to `num_qo_heads` for MHA, fewer for GQA).
    pub num_kv_heads: usize,
    /// RoPE base θ: `inv_freq[i] = θ ^ (-2i / rotary_dim)` before scaling. Defaults to 10000.
    #[config(default = 10000.0)]
    pub rope_base: f64,
    /// Which elements form a pair (NeoX halves by default, or GPT-J's interleaved pairs).
    #[config(default = "RopeStyle::Neox")]
    pub style: RopeStyle,
    /// Elements rotated per head, from the start of the head (even, `2..=head_dim`); the rest
    /// pass through unchanged. `None`: the whole head.
    pub rotary_dim: Option<usize>,
    /// Frequency scaling (`linear`, `llama3`, `yarn`, `longrope`); none by default.
    #[config(default = "RopeScaling::None")]
    pub scaling: RopeScaling,
    /// M-RoPE sections: `positions` is then `[3, num_tokens]`.
    pub mrope: Option<MRope>,
    /// Rounds the inverse frequencies (after scaling) to this float dtype before use, as
    /// transformers does when it holds its rotary `inv_freq` buffer in a bf16 or f16 checkpoint's
    /// dtype; `None` (the default): float64 frequencies.
    pub inv_freq_dtype: Option<DType>,
    /// Checked mode: read the slots back to the host before the launch and report a slot past
    /// the pool, or a slot used twice, as an error; positions of a 64-bit or `u32` tensor are
    /// read back too and one outside the i32 range is an error. Off by default (it costs a
    /// device sync). Without it such slots are still never written outside the pool, and a
    /// position outside i32 is taken as its low 32 bits (as an i32: the rotation of that
    /// position; every i32 position, negative ones included, rotates exactly).
    #[config(default = false)]
    pub check_slots: bool,
    /// Whether the call returns the rotated keys. On (the default) `k_rot` is `[T, Hkv, D]`;
    /// off, the kernel writes the rotated keys only into the pool rows and `k_rot` comes back
    /// empty (`[0, Hkv, D]`): one output less to allocate and write, for callers that read keys
    /// from the pool only (the attention layer, the decoder).
    #[config(default = true)]
    pub k_rot: bool,
    /// Epsilon of the per-head q/k RMSNorm, for calls whose inputs carry norm weights
    /// ([`RopePoolInputs::with_qk_norm`](crate::RopePoolInputs::with_qk_norm)); a model's
    /// `rms_norm_eps`. Unused otherwise. Defaults to 1e-6 (Qwen3's).
    #[config(default = 1e-6)]
    pub qk_norm_eps: f64,
}

impl RopePoolConfig {
    /// Elements rotated per head: `rotary_dim`, or `head_dim` when unset.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim.unwrap_or(self.head_dim)
    }

    /// The frequencies of this config (float64, and the kernel's table), checked and cached per
    /// process: the errors of checks 12, 13 and 15 of the contract come from here.
    pub fn frequencies(&self) -> Result<Arc<RopeFrequencies>, RopePoolError> {
        of(self)
    }
}

/// The frequencies of `config`, checked (checks 12, 13, 15 of the contract and finite
/// results) and cached for the life of the process. A thread's last config is remembered
/// too: a decode loop, which passes the same config every call, finds its frequencies with
/// one comparison (no key built, no lock taken).
fn of(config: &RopePoolConfig) -> Result<Arc<RopeFrequencies>, RopePoolError> {
    thread_local! {
        static LAST: RefCell<Option<(RopePoolConfig, Arc<RopeFrequencies>)>> =
            const { RefCell::new(None) };
    }
    let last = LAST.with_borrow(|last| {
        last.as_ref()
            .filter(|(c, _)| c == config)
            .map(|(_, f)| f.clone())
    });
    if let Some(found) = last {
        return Ok(found);
    }
    let found = of_cached(config)?;
    LAST.set(Some((config.clone(), found.clone())));
    Ok(found)
}

fn of_cached(config: &RopePoolConfig) -> Result<Arc<RopeFrequencies>, RopePoolError> {
    type Cache = HashMap<(Vec<u64>, Option<String>), Arc<RopeFrequencies>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let key = cache_key(config);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = lock(cache).get(&key) {
        return Ok(found.clone());
    }
    let frequencies = Arc::new(compute(config)?);
    let mut cache = lock(cache);
    if cache.len() >= 64 {
        cache.clear();
    }
    cache.insert(key, frequencies.clone());
    Ok(frequencies)
}

fn compute(config: &RopePoolConfig) -> Result<RopeFrequencies, RopePoolError> {
    let head_dim = config.head_dim;
    let rotary_dim = config.rotary_dim();
    if rotary_dim < 2 || rotary_dim > head_dim || !rotary_dim.is_multiple_of(2) {
        return Err(RopePoolError::RotaryDim {
            rotary_dim,
            head_dim,
        });
    }
    let half = rotary_dim / 2;
    if let Some(mrope) = &config.mrope {
        let sum: usize = mrope.section.iter().sum();
        if sum != half {
            return Err(RopePoolError::MropeSection { sum, rotary_dim });
        }
    }
    let base = config.rope_base;
    let default: Vec<f64> = (0..half)
        .map(|i| 1.0 / base.powf((2 * i) as f64 / rotary_dim as f64))
        .collect();
    let (mut inv_freq, mut long, attention_factor) = scaled(&config.scaling, &default, base)?;
    if let Some(dtype) = config.inv_freq_dtype {
        let round = |f: &mut f64| {
            *f = match dtype {
                DType::BF16 => half::bf16::from_f64(*f).to_f64(),
                DType::F16 => half::f16::from_f64(*f).to_f64(),
                DType::F32 => *f as f32 as f64,
                _ => *f,
            }
        };
        inv_freq.iter_mut().for_each(round);
        if let Some((l, _)) = long.as_mut() {
            l.iter_mut().for_each(round);
        }
    }
    let finite = |v: &[f64]| v.iter().all(|f| f.is_finite() && *f >= 0.0);
    if !finite(&inv_freq)
        || !long.as_ref().is_none_or(|(l, _)| finite(l))
        || !attention_factor.is_finite()
    {
        return Err(RopePoolError::RopeScaling {
            what: "the frequencies are not finite".into(),
        });
    }
    let rows = config
        .mrope
        .map(|m| (0..half).map(|i| m.row(i)).collect::<Vec<u8>>());
    Ok(RopeFrequencies::new(
        inv_freq,
        long,
        attention_factor,
        rows,
        config.style,
    ))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every field of `config` the frequencies depend on: the plain fields as bits; the rounding
/// dtype (by name: two dtypes of one size round differently) and the scaling (when there is one)
/// in their `Debug` forms, which print every float exactly.
fn cache_key(config: &RopePoolConfig) -> (Vec<u64>, Option<String>) {
    let mut key = vec![
        config.head_dim as u64,
        config.rotary_dim() as u64,
        config.rope_base.to_bits(),
        config.style as u64,
    ];
    if let Some(m) = &config.mrope {
        key.extend(m.section.map(|s| s as u64));
        key.push(m.interleaved as u64 + 1);
    }
    let named = config.inv_freq_dtype.is_some() || config.scaling != RopeScaling::None;
    let names = named.then(|| format!("{:?} {:?}", config.inv_freq_dtype, config.scaling));
    (key, names)
}
