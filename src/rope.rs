//! The RoPE variants of the models people run, and their frequencies.
//!
//! A [`RopePoolConfig`] names a pair layout ([`RopeStyle`]), a rotary
//! dimension, a frequency [`RopeScaling`] and optionally M-RoPE sections ([`MRope`]).
//! [`RopeFrequencies`] turns them into the inverse frequencies, in float64 with transformers'
//! formulas (`modeling_rope_utils`), and into the kernel's exact-angle table. Every path of the
//! op (kernel, Flex, the float64 reference, the unfused tensor ops) reads its frequencies from
//! here.

use crate::{RopePoolConfig, RopePoolError};
use burn::tensor::DType;
use rope_pool_kernels::RopeTable;
use std::cell::RefCell;
use std::collections::HashMap;
use std::f64::consts::PI;
use std::sync::{Arc, Mutex, OnceLock};

/// Which elements of a head form a rotation pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Halves: element `i` pairs with `i + rotary_dim / 2` (Llama, Qwen, Mistral, GPT-NeoX).
    #[default]
    Neox,
    /// Interleaved: element `2i` pairs with `2i + 1` (GPT-J, GLM, DeepSeek MLA).
    Gptj,
}

/// How the inverse frequencies are scaled: transformers' `rope_type` and its fields.
///
/// Optional fields follow transformers' defaults when `None`. `max_position_embeddings` is the
/// model's (the config's top-level field), which the formulas read where transformers does.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum RopeScaling {
    /// `inv_freq[i] = rope_base ^ (-2i / rotary_dim)`.
    #[default]
    None,
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        /// Scale factor.
        factor: f64,
    },
    /// Llama 3.1's scaling: low frequencies divided by `factor`, high ones kept, a smooth ramp
    /// between the wavelengths `original_max_position_embeddings / {low,high}_freq_factor`.
    Llama3 {
        /// Scale of the low frequencies.
        factor: f64,
        /// Wavelength bound (as a divisor of the context) below which frequencies are scaled.
        low_freq_factor: f64,
        /// Wavelength bound above which frequencies are kept.
        high_freq_factor: f64,
        /// Context length of pre-training.
        original_max_position_embeddings: f64,
    },
    /// YaRN (Qwen2.5 long context, DeepSeek-V3): interpolation blended with extrapolation by a
    /// ramp over the frequencies, and an attention factor on cos/sin.
    Yarn {
        /// Scale factor.
        factor: f64,
        /// Context length of pre-training (default: `max_position_embeddings`).
        original_max_position_embeddings: Option<f64>,
        /// The model's context length.
        max_position_embeddings: Option<f64>,
        /// Scale of cos and sin (default from `factor`, `mscale`, `mscale_all_dim`).
        attention_factor: Option<f64>,
        /// Ramp bound in rotations (default 32).
        beta_fast: Option<f64>,
        /// Ramp bound in rotations (default 1).
        beta_slow: Option<f64>,
        /// DeepSeek's attention-factor numerator scale.
        mscale: Option<f64>,
        /// DeepSeek's attention-factor denominator scale.
        mscale_all_dim: Option<f64>,
        /// Round the ramp bounds to whole dimensions (default true).
        truncate: Option<bool>,
    },
    /// LongRoPE (Phi-3 128k): a per-frequency divisor list for short contexts and one for long
    /// ones, and an attention factor.
    LongRope {
        /// Divisors used while the call's largest position is below the original context.
        short_factor: Vec<f64>,
        /// Divisors used from `original_max_position_embeddings` on.
        long_factor: Vec<f64>,
        /// Context length of pre-training (default: `max_position_embeddings`).
        original_max_position_embeddings: Option<f64>,
        /// The model's context length.
        max_position_embeddings: Option<f64>,
        /// Scale of cos and sin (default from the context ratio).
        attention_factor: Option<f64>,
        /// Scale factor, used for the attention factor when there is no original context.
        factor: Option<f64>,
    },
}

/// M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): `positions` is `[3, num_tokens]` (temporal, height,
/// width) and each frequency takes its position from one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MRope {
    /// Frequencies per row `[t, h, w]`; they sum to `rotary_dim / 2`.
    pub section: [usize; 3],
    /// Qwen3-VL's layout: rows 1 and 2 at frequencies `i ≡ 1, 2 (mod 3)` below `3·h`, `3·w`, row
    /// 0 elsewhere. Otherwise contiguous sections `t`, `h`, `w`.
    pub interleaved: bool,
}

impl MRope {
    /// The position row (0, 1 or 2) of frequency `i`.
    pub fn row(&self, i: usize) -> u8 {
        let [t, h, w] = self.section;
        if self.interleaved {
            match i % 3 {
                1 if i < 3 * h => 1,
                2 if i < 3 * w => 2,
                _ => 0,
            }
        } else if i < t {
            0
        } else if i < t + h {
            1
        } else {
            2
        }
    }
}

/// The frequencies of a config, in float64, and the kernel's table of them.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFrequencies {
    /// `rotary_dim / 2` inverse frequencies (LongRoPE: the short set).
    pub inv_freq: Vec<f64>,
    /// LongRoPE: the long set and the largest position from which a call uses it.
    pub long: Option<(Vec<f64>, i64)>,
    /// Scale of cos and sin.
    pub attention_factor: f64,
    /// M-RoPE: the position row of each frequency.
    pub rows: Option<Vec<u8>>,
    /// Pair layout.
    pub style: RopeStyle,
    /// The exact-angle table the kernel and the Flex path read.
    pub table: RopeTable,
}

impl RopeFrequencies {
    /// The inverse frequencies a call whose largest position is `max_position` uses.
    pub fn inv_freq_at(&self, max_position: i64) -> &[f64] {
        match &self.long {
            Some((long, from)) if max_position >= *from => long,
            _ => &self.inv_freq,
        }
    }

    /// The position row of frequency `i` (0 without M-RoPE).
    pub fn row(&self, i: usize) -> usize {
        self.rows.as_ref().map_or(0, |rows| rows[i] as usize)
    }

    /// The frequencies of `config`, checked (checks 12, 13, 15 of the contract and finite
    /// results) and cached for the life of the process. A thread's last config is remembered
    /// too: a decode loop, which passes the same config every call, finds its frequencies with
    /// one comparison (no key built, no lock taken).
    pub fn of(config: &RopePoolConfig) -> Result<Arc<Self>, RopePoolError> {
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
        let found = Self::of_cached(config)?;
        LAST.set(Some((config.clone(), found.clone())));
        Ok(found)
    }

    fn of_cached(config: &RopePoolConfig) -> Result<Arc<Self>, RopePoolError> {
        type Cache = HashMap<(Vec<u64>, Option<String>), Arc<RopeFrequencies>>;
        static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
        let key = cache_key(config);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(found) = lock(cache).get(&key) {
            return Ok(found.clone());
        }
        let frequencies = Arc::new(Self::compute(config)?);
        let mut cache = lock(cache);
        if cache.len() >= 64 {
            cache.clear();
        }
        cache.insert(key, frequencies.clone());
        Ok(frequencies)
    }

    fn compute(config: &RopePoolConfig) -> Result<Self, RopePoolError> {
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
        let table = RopeTable::new(
            &inv_freq,
            long.as_ref().map(|(l, from)| (l.as_slice(), *from)),
            rows.as_deref(),
            config.style == RopeStyle::Gptj,
            attention_factor,
        );
        Ok(Self {
            inv_freq,
            long,
            attention_factor,
            rows,
            style: config.style,
            table,
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every field of `config` the frequencies depend on: the plain fields as bits, the scaling (when
/// there is one) in its `Debug` form, which prints every float exactly.
fn cache_key(config: &RopePoolConfig) -> (Vec<u64>, Option<String>) {
    let mut key = vec![
        config.head_dim as u64,
        config.rotary_dim() as u64,
        config.rope_base.to_bits(),
        config.style as u64,
        config
            .inv_freq_dtype
            .map_or(0, |d| d.size() as u64 * 8 + matches!(d, DType::BF16) as u64),
    ];
    if let Some(m) = &config.mrope {
        key.extend(m.section.map(|s| s as u64));
        key.push(m.interleaved as u64 + 1);
    }
    let scaling = (config.scaling != RopeScaling::None).then(|| format!("{:?}", config.scaling));
    (key, scaling)
}

fn bad(what: impl Into<String>) -> RopePoolError {
    RopePoolError::RopeScaling { what: what.into() }
}

/// `value` if it is positive and finite, else the check-15 error naming `name`.
fn positive(name: &str, value: f64) -> Result<f64, RopePoolError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(bad(format!(
            "{name} must be positive and finite, got {value}"
        )))
    }
}

fn positive_opt(name: &str, value: Option<f64>) -> Result<Option<f64>, RopePoolError> {
    value.map(|v| positive(name, v)).transpose()
}

type Scaled = (Vec<f64>, Option<(Vec<f64>, i64)>, f64);

/// transformers' `_compute_*_parameters`, in float64, from the default frequencies.
fn scaled(scaling: &RopeScaling, default: &[f64], base: f64) -> Result<Scaled, RopePoolError> {
    let half = default.len();
    let dim = 2 * half;
    Ok(match scaling {
        RopeScaling::None => (default.to_vec(), None, 1.0),
        RopeScaling::Linear { factor } => {
            let factor = positive("factor", *factor)?;
            (default.iter().map(|f| f / factor).collect(), None, 1.0)
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let factor = positive("factor", *factor)?;
            let low = positive("low_freq_factor", *low_freq_factor)?;
            let high = positive("high_freq_factor", *high_freq_factor)?;
            let context = positive(
                "original_max_position_embeddings",
                *original_max_position_embeddings,
            )?;
            if high == low {
                return Err(bad("high_freq_factor must differ from low_freq_factor"));
            }
            let (low_wavelen, high_wavelen) = (context / low, context / high);
            let inv_freq = default
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (context / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect();
            (inv_freq, None, 1.0)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            max_position_embeddings,
            attention_factor,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            truncate,
        } => {
            let factor = positive("factor", *factor)?;
            let original = positive_opt(
                "original_max_position_embeddings",
                *original_max_position_embeddings,
            )?;
            let max = positive_opt("max_position_embeddings", *max_position_embeddings)?;
            let context = original.or(max).ok_or_else(|| {
                bad("yarn needs original_max_position_embeddings or max_position_embeddings")
            })?;
            let beta_fast = positive("beta_fast", beta_fast.unwrap_or(32.0))?;
            let beta_slow = positive("beta_slow", beta_slow.unwrap_or(1.0))?;
            let mscale = positive_opt("mscale", *mscale)?;
            let mscale_all_dim = positive_opt("mscale_all_dim", *mscale_all_dim)?;
            let get_mscale = |scale: f64, m: f64| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * m * scale.ln() + 1.0
                }
            };
            let attention_factor = match (
                positive_opt("attention_factor", *attention_factor)?,
                mscale,
                mscale_all_dim,
            ) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) => get_mscale(factor, m) / get_mscale(factor, all),
                (None, _, _) => get_mscale(factor, 1.0),
            };
            let correction_dim = |rotations: f64| {
                dim as f64 * (context / (rotations * 2.0 * PI)).ln() / (2.0 * base.ln())
            };
            let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
            if truncate.unwrap_or(true) {
                low = low.floor();
                high = high.ceil();
            }
            let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
            if low == high {
                high += 0.001;
            }
            let inv_freq = default
                .iter()
                .enumerate()
                .map(|(i, &extrapolation)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrapolation_factor = 1.0 - ramp;
                    let interpolation = extrapolation / factor;
                    interpolation * (1.0 - extrapolation_factor)
                        + extrapolation * extrapolation_factor
                })
                .collect();
            (inv_freq, None, attention_factor)
        }
        RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            max_position_embeddings,
            attention_factor,
            factor,
        } => {
            for (name, list) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if list.len() != half {
                    return Err(bad(format!(
                        "{name} has {} entries, expected rotary_dim / 2 = {half}",
                        list.len()
                    )));
                }
                for &f in list {
                    positive(name, f)?;
                }
            }
            let original = positive_opt(
                "original_max_position_embeddings",
                *original_max_position_embeddings,
            )?;
            let max = positive_opt("max_position_embeddings", *max_position_embeddings)?;
            let factor = positive_opt("factor", *factor)?;
            let (context, factor) = match (original, max) {
                (Some(original), Some(max)) => (original, max / original),
                (Some(original), None) => (original, factor.unwrap_or(1.0)),
                (None, Some(max)) => (max, factor.unwrap_or(1.0)),
                (None, None) => {
                    return Err(bad(
                        "longrope needs original_max_position_embeddings or max_position_embeddings",
                    ));
                }
            };
            let attention_factor = match positive_opt("attention_factor", *attention_factor)? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / context.ln()).sqrt(),
            };
            let divide = |list: &[f64]| -> Vec<f64> {
                default.iter().zip(list).map(|(f, d)| f / d).collect()
            };
            let from = context.ceil().min(i64::MAX as f64) as i64;
            (
                divide(short_factor),
                Some((divide(long_factor), from)),
                attention_factor,
            )
        }
    })
}
