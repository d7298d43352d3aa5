//! What the kernel needs to know of a call's RoPE: the comptime [`RopeVariant`] (one compiled
//! kernel per variant set) and the [`RopeTable`] (the frequency table in exact-angle parts, plus
//! the runtime scalars), built on the host from float64 inverse frequencies.

use super::angle::{TURN_PARTS, host_angle, split_turns};

/// The variant set a kernel is compiled for: each flag switches one seam of the kernel
/// (`pair_offsets`, the pass-through tail, the position of a frequency, the table half). The
/// plain NeoX op is `RopeVariant::default()`.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct RopeVariant {
    /// GPT-J pairs `(2i, 2i + 1)` instead of NeoX halves `(i, i + rotary_dim / 2)`.
    pub interleaved: bool,
    /// `rotary_dim < head_dim`: the elements past `rotary_dim` pass through unchanged.
    pub partial: bool,
    /// M-RoPE: `positions` is `[3, T]` and each frequency takes its position from one row.
    pub mrope: bool,
    /// LongRoPE: the table holds a short and a long frequency set; the long one serves a call
    /// whose largest position is `>= long_from`.
    pub long_short: bool,
}

/// The frequency table of a call and the scalars that go with it.
///
/// `values` is laid out in segments of `rotary_dim / 2` f32: `[f1 | f2 | f3 | g3 | g4]` (the turns
/// of [`split_turns`]), then for LongRoPE the long set's five parts, then for M-RoPE the
/// row masks `[m0 | m1 | m2]` (1.0 where frequency `i` takes its position from that row).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTable {
    /// The compiled variant.
    pub(crate) variant: RopeVariant,
    /// Rotated elements per head (even; `head_dim` unless partial).
    pub(crate) rotary_dim: usize,
    /// Scale applied to cos and sin (YaRN, LongRoPE; 1 otherwise).
    pub(crate) attention_factor: f32,
    /// LongRoPE: the smallest largest-position that selects the long set.
    pub(crate) long_from: i32,
    /// The table, see above.
    pub(crate) values: Vec<f32>,
    /// A content hash of the table: the key of its device copy.
    pub(crate) id: u64,
}

impl RopeTable {
    /// Builds the table of `inv_freq` (`rotary_dim / 2` float64 inverse frequencies), with
    /// LongRoPE's long set and threshold, M-RoPE's row of each frequency (0, 1 or 2), and the
    /// attention factor. The variant's `partial` flag is left false: the launch sets it from the
    /// geometry (whatever of the head the table does not rotate).
    pub fn new(
        inv_freq: &[f64],
        long: Option<(&[f64], i64)>,
        rows: Option<&[u8]>,
        interleaved: bool,
        attention_factor: f64,
    ) -> Self {
        let half = inv_freq.len();
        let mut values = split_turns(inv_freq);
        let mut long_from = i32::MAX;
        if let Some((long_inv_freq, from)) = long {
            values.extend(split_turns(long_inv_freq));
            long_from = from.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
        }
        if let Some(rows) = rows {
            for row in 0..3u8 {
                values.extend(rows.iter().map(|&r| if r == row { 1.0 } else { 0.0 }));
            }
        }
        let variant = RopeVariant {
            interleaved,
            partial: false,
            mrope: rows.is_some(),
            long_short: long.is_some(),
        };
        let attention_factor = attention_factor as f32;
        let id = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (variant, half, attention_factor.to_bits(), long_from).hash(&mut hasher);
            values.iter().for_each(|v| v.to_bits().hash(&mut hasher));
            hasher.finish()
        };
        Self {
            variant,
            rotary_dim: 2 * half,
            attention_factor,
            long_from,
            values,
            id,
        }
    }

    /// Frequencies per head (`rotary_dim / 2`).
    pub fn half(&self) -> usize {
        self.rotary_dim / 2
    }

    /// Whether a call whose largest position is `max_position` uses the long set.
    pub fn uses_long(&self, max_position: i64) -> bool {
        self.variant.long_short && max_position >= self.long_from as i64
    }

    /// The compiled variant (its `partial` flag is set by the launch).
    pub fn variant(&self) -> RopeVariant {
        self.variant
    }

    /// The table's values, laid out as the type's doc says.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The host twin of the kernel's angle: cos and sin (times the attention factor) of every
    /// frequency `i` for a token at `position(i)` (its M-RoPE row's position, else the token's
    /// one), in the long set when `long`. Used by the Flex backend.
    pub fn cos_sin(
        &self,
        position: impl Fn(usize) -> i32,
        long: bool,
        cos: &mut [f32],
        sin: &mut [f32],
    ) {
        let half = self.half();
        let set = if long && self.variant.long_short {
            TURN_PARTS * half
        } else {
            0
        };
        let t = &self.values[set..];
        for i in 0..half {
            let angle = host_angle(position(i), std::array::from_fn(|j| t[j * half + i]));
            let (s, c) = angle.sin_cos();
            cos[i] = c * self.attention_factor;
            sin[i] = s * self.attention_factor;
        }
    }
}
