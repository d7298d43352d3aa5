//! The one random generator of the tests and benchmarks: a small xorshift, so every case is
//! reproducible from its seed. Standalone (no imports), so the kernels crate's tests include this
//! same file.

/// A xorshift64 generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends on every bit of `seed` (mixed first).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A generator starting from the raw, non-zero `state` (as the benchmarks seed theirs).
    pub fn from_state(state: u64) -> Self {
        Rng(state.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[-2, 2)`, never exactly zero.
    pub fn value(&mut self) -> f64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let x = 4.0 * u - 2.0;
        if x == 0.0 { 0.5 } else { x }
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `n` draws of [`Rng::value`].
    pub fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.value()).collect()
    }
}
