//! The parameters of one `rope_pool_fused` call.

/// Parameters of [`rope_pool_fused`](crate::rope_pool_fused): the head geometry the tensors must
/// have, the RoPE base θ, and whether slots are checked on the host before the launch.
///
/// ```
/// use burn_rope_pool::RopePoolConfig;
/// // Llama-3-8B: 32 query heads, 8 kv heads, head_dim 128, θ = 500000.
/// let config = RopePoolConfig::new(128, 32, 8).with_rope_base(500_000.0);
/// assert_eq!(config.rope_base, 500_000.0);
/// ```
#[derive(Clone, Debug, PartialEq, derive_new::new)]
pub struct RopePoolConfig {
    /// Elements per head; even.
    pub head_dim: usize,
    /// Query (and output) heads per token.
    pub num_qo_heads: usize,
    /// Key/value heads per token (equal to `num_qo_heads` for MHA, fewer for GQA).
    pub num_kv_heads: usize,
    /// RoPE base θ: `inv_freq[i] = θ ^ (-2i / head_dim)`. Defaults to 10000.
    #[new(value = "10000.0")]
    pub rope_base: f64,
    /// Checked mode: read the slots back to the host before the launch and report a slot past
    /// the pool, or a slot used twice, as an error. Off by default (it costs a device sync);
    /// without it such slots are still never written outside the pool.
    #[new(value = "false")]
    pub check_slots: bool,
}

impl RopePoolConfig {
    /// Sets the RoPE base θ.
    pub fn with_rope_base(mut self, rope_base: f64) -> Self {
        self.rope_base = rope_base;
        self
    }

    /// Turns the checked mode (see [`RopePoolConfig::check_slots`]) on or off.
    pub fn with_check_slots(mut self, check_slots: bool) -> Self {
        self.check_slots = check_slots;
        self
    }
}
