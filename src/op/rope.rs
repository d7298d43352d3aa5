//! The RoPE variants of the models people run, and their frequencies.
//!
//! A [`RopePoolConfig`](crate::RopePoolConfig) names a pair layout ([`RopeStyle`]), a rotary
//! dimension, a frequency [`RopeScaling`] and optionally M-RoPE sections ([`MRope`]).
//! [`RopeFrequencies`] turns them into the inverse frequencies, in float64 with transformers'
//! formulas (`modeling_rope_utils`), and into the kernel's exact-angle table. Every path of the
//! op (kernel, Flex, the float64 reference, the unfused tensor ops) reads its frequencies from
//! here.

use crate::op::RopePoolError;
use rope_pool_kernels::rope::RopeTable;
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

/// Which elements of a head form a rotation pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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

impl RopeScaling {
    /// YaRN with `factor` and the pre-training and model contexts, every other field at
    /// transformers' default.
    pub fn yarn(
        factor: f64,
        original_max_position_embeddings: Option<f64>,
        max_position_embeddings: Option<f64>,
    ) -> Self {
        Self::Yarn {
            factor,
            original_max_position_embeddings,
            max_position_embeddings,
            attention_factor: None,
            beta_fast: None,
            beta_slow: None,
            mscale: None,
            mscale_all_dim: None,
            truncate: None,
        }
    }
}

/// M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): `positions` is `[3, num_tokens]` (temporal, height,
/// width) and each frequency takes its position from one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    pub(crate) table: RopeTable,
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

    /// The frequencies of a call: the (scaled) inverse frequencies, LongRoPE's long set and the
    /// largest position from which it applies, the attention factor, M-RoPE's row of each
    /// frequency and the pair style; builds the kernel's table of them.
    pub(crate) fn new(
        inv_freq: Vec<f64>,
        long: Option<(Vec<f64>, i64)>,
        attention_factor: f64,
        rows: Option<Vec<u8>>,
        style: RopeStyle,
    ) -> Self {
        let table = RopeTable::new(
            &inv_freq,
            long.as_ref().map(|(l, from)| (l.as_slice(), *from)),
            rows.as_deref(),
            style == RopeStyle::Gptj,
            attention_factor,
        );
        Self {
            inv_freq,
            long,
            attention_factor,
            rows,
            style,
            table,
        }
    }
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

pub(crate) type Scaled = (Vec<f64>, Option<(Vec<f64>, i64)>, f64);

/// transformers' `_compute_*_parameters`, in float64, from the default frequencies.
pub(crate) fn scaled(
    scaling: &RopeScaling,
    default: &[f64],
    base: f64,
) -> Result<Scaled, RopePoolError> {
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
