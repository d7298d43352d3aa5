//! The kernel compiled to Metal Shading Language by CubeCL's MSL compiler (the one cubecl-wgpu
//! uses on macOS), without a Mac: the generated source is committed under `kernels/generated/`
//! so reviewers read exactly what runs on Apple GPUs, and this test fails when it is stale.
//! Regenerate with `UPDATE_GENERATED=1 cargo test -p rope-pool-kernels --test msl`.

mod common;

use cubecl::Compiler as _;
use cubecl::client::Client;
use cubecl::ir::{AddressType, ElemType, FloatKind, IntKind, UIntKind};
use cubecl::prelude::*;
use cubecl_cpp::MslCompiler;
use cubecl_cpp::shared::CompilationOptions;
use rope_pool_kernels::rope::{RopeVariant, rope_pool_kernel};
use std::sync::Arc;

/// Vector width of the committed source (16-byte f32 loads; what Apple GPUs prefer).
const VECTOR: usize = 4;

fn msl(client: &Client, float: FloatKind, variant: RopeVariant, fp8: bool) -> String {
    let tensor = |dims: [usize; 3]| common::dummy_tensor(client, &dims);
    let vector = |len: usize| common::dummy_tensor(client, &[len]);
    let (pool_row, pool_elem) = match fp8 {
        true => (2, ElemType::UInt(UIntKind::U32)),
        false => (8, ElemType::Float(float)),
    };
    let kernel = rope_pool_kernel::create_dummy_kernel(
        Arc::new(client.properties().clone()),
        Arc::new(client.target_properties().clone()),
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(256),
        AddressType::U32,
        VECTOR,
        // fp8 pools: one u32 word per vector of four.
        if fp8 { 1 } else { VECTOR },
        tensor([1, 4, 8]),
        tensor([1, 2, 8]),
        tensor([1, 2, 8]),
        vector(1),
        vector(1),
        vector(20),
        tensor([1, 4, 8]),
        tensor([1, 2, 8]),
        tensor([4, 2, pool_row]),
        tensor([4, 2, pool_row]),
        6,
        2,
        1.0,
        i32::MAX,
        1.0,
        1.0,
        variant,
        true,
        false,
        fp8,
        [
            ElemType::Float(float),
            ElemType::Int(IntKind::I32),
            pool_elem,
        ],
    );
    let source = MslCompiler::default()
        .compile(kernel.define(), &CompilationOptions::default())
        .expect("the kernel compiles to MSL");
    source.to_string()
}

/// The source's tokens with SSA names (`v123`) and the entry point's id hash erased, sorted: the
/// MSL compiler numbers variables and orders the builtin parameters by hash-map order, and the
/// hash varies with the build's features, so two generations of the same kernel differ only in
/// those. Any real change (an operation, a type, a buffer) still shows.
fn canonical(source: &str) -> Vec<String> {
    let mut tokens: Vec<String> = source
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .map(|t| match t.rsplit_once('_') {
            Some((name, hash))
                if name.starts_with("rope_pool_kernel")
                    && hash.len() == 8
                    && hash.chars().all(|c| c.is_ascii_hexdigit()) =>
            {
                name
            }
            _ => t,
        })
        .map(|t| match t.strip_prefix('v') {
            Some(n) if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => "v#".into(),
            _ => match t.rsplit_once("_v") {
                Some((head, n)) if n.chars().all(|c| c.is_ascii_digit()) => format!("{head}_v#"),
                _ => t.to_string(),
            },
        })
        .collect();
    tokens.sort();
    tokens
}

#[test]
fn committed_metal_source_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let update = std::env::var("UPDATE_GENERATED").is_ok();
    let plain = RopeVariant::default();
    // The plain op in every dtype, and each variant set a model hits in f16 (GPT-J-6B: interleaved
    // pairs over a partial head; GPT-NeoX/Phi-2: partial; Qwen2-VL: M-RoPE; Phi-3: LongRoPE).
    let sets = [
        ("f32", FloatKind::F32, plain),
        ("f16", FloatKind::F16, plain),
        ("bf16", FloatKind::BF16, plain),
        ("f16_fp8_pool", FloatKind::F16, plain),
        (
            "f16_gptj_partial",
            FloatKind::F16,
            RopeVariant {
                interleaved: true,
                partial: true,
                ..plain
            },
        ),
        (
            "f16_partial",
            FloatKind::F16,
            RopeVariant {
                partial: true,
                ..plain
            },
        ),
        (
            "f16_mrope",
            FloatKind::F16,
            RopeVariant {
                mrope: true,
                ..plain
            },
        ),
        (
            "f16_longrope",
            FloatKind::F16,
            RopeVariant {
                long_short: true,
                ..plain
            },
        ),
    ];
    // The kernel arguments are built on a wgpu client (its properties); any adapter will do.
    let Some(client) = common::any_client("MSL check") else {
        return;
    };
    for (name, float, variant) in sets {
        let source = msl(&client, float, variant, name.contains("fp8"));
        // What the source must contain: a Metal kernel entry point, the storage type, and the
        // f32 trigonometry.
        assert!(
            source.contains("[[kernel]] void rope_pool_kernel"),
            "{name}: no Metal kernel entry point"
        );
        let storage = match float {
            FloatKind::F32 => "float",
            FloatKind::F16 => "half",
            _ => "bfloat",
        };
        assert!(
            source.contains(storage),
            "{name}: storage type `{storage}` missing"
        );
        assert!(
            source.contains("cos(") && source.contains("sin("),
            "{name}: no cos/sin"
        );
        let path = dir.join(format!("rope_pool_{name}.metal"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &source).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            canonical(&committed) == canonical(&source),
            "{} is stale: regenerate with UPDATE_GENERATED=1 cargo test -p rope-pool-kernels --test msl",
            path.display()
        );
    }
}
