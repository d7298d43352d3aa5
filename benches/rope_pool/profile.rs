//! `--profile` (feature `profile`): where a call's host time goes, from the `--host-cost` loops
//! under the sampling profiler of [`host_profile`](crate::host_profile).

use crate::cases::{Layout, MODELS, Shape, inputs, variant_config};
use crate::host_cost::{add_one, burn_loop, fused_loop, sum_last};
use crate::host_profile;
use crate::instruments::thread_cpu;
use burn::tensor::{DType, Device};

/// A loop to profile: its title, its file name, and one call per `f(sync)`.
type Loop<'a> = (&'static str, &'static str, Box<dyn FnMut(bool) + 'a>);

/// The `--profile` tables on `device` (see [`host_profile`]).
pub fn profile(
    device: &Device,
    name: &str,
    quick: bool,
    seconds: f64,
    out: Option<&std::path::Path>,
) {
    let model = MODELS[0];
    let pool = if quick { 16_384 } else { 131_072 };
    let dtype = DType::F16;
    println!(
        "\n### {name}: where a call's host time goes ({device:?}, {dtype:?} {})",
        model.name
    );
    let config = variant_config("neox", model);
    let no_k_rot = config.clone().with_k_rot(false);
    for tokens in [1usize, 32] {
        let shape = Shape {
            dtype,
            tokens,
            model,
            pool,
        };
        let x = inputs(device, shape, Layout::random(7));
        let title = |what: &str| format!("{what}, {tokens} tokens");
        let file = |what: &str| format!("{name}-{what}-{tokens}");
        let loops: [Loop; 4] = [
            (
                "rope_pool_fused",
                "fused",
                Box::new(fused_loop(device, shape, &x, &config)),
            ),
            (
                "rope_pool_fused, k_rot off",
                "no-k-rot",
                Box::new(fused_loop(device, shape, &x, &no_k_rot)),
            ),
            ("Burn's q + 1", "add", Box::new(burn_loop(&x.q, add_one))),
            (
                "Burn's q.sum_dim(2)",
                "sum",
                Box::new(burn_loop(&x.q, sum_last)),
            ),
        ];
        for (what, short, f) in loops {
            let text =
                host_profile::profile(thread_cpu, &title(what), &file(short), seconds, out, f);
            println!("{text}");
        }
    }
}
