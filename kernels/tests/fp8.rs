//! The e4m3 codec against the golden file `kernels/tests/golden/e4m3.json` (an independent float64
//! encoder, checked against ml_dtypes and torch; `scripts/generators/fp8_golden.py`): every
//! input's code bit for bit, on the host and in a kernel on wgpu (Mesa's software Vulkan in CI),
//! and the value of every code.

mod common;

use cubecl::ir::AddressType;
use cubecl::prelude::*;
use rope_pool_kernels::common::fp8::{
    Fp8Decode, decode_e4m3_kernel, decode_host, encode_e4m3_kernel, encode_host,
};

struct Golden {
    inputs: Vec<f32>,
    codes: Vec<u8>,
    decoded: Vec<f32>,
}

fn golden() -> Golden {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/e4m3.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let numbers = |key: &str| -> Vec<u64> {
        doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    Golden {
        inputs: numbers("inputs_f32_bits")
            .iter()
            .map(|&b| f32::from_bits(b as u32))
            .collect(),
        codes: numbers("codes").iter().map(|&c| c as u8).collect(),
        decoded: numbers("decoded_f32_bits")
            .iter()
            .map(|&b| f32::from_bits(b as u32))
            .collect(),
    }
}

/// Equal bits, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn host_codec_matches_the_golden_file() {
    let g = golden();
    assert_eq!(g.inputs.len(), g.codes.len());
    for (x, &code) in g.inputs.iter().zip(&g.codes) {
        let got = encode_host(*x);
        // A NaN input may keep its sign in either NaN code.
        let ok = got == code || (x.is_nan() && got & 0x7F == 0x7F);
        assert!(ok, "encode({x:e}) = {got:#04x}, want {code:#04x}");
    }
    for (code, want) in g.decoded.iter().enumerate() {
        let got = decode_host(code as u8);
        assert!(
            same(got, *want),
            "decode({code:#04x}) = {got:e}, want {want:e}"
        );
    }
}

#[test]
fn kernel_codec_matches_the_golden_file() {
    let Some(client) = common::client("fp8 kernel test") else {
        return;
    };
    let g = golden();
    // Encode: the inputs padded to whole words (scale 1), the codes read back bit for bit.
    let mut inputs = g.inputs.clone();
    inputs.resize(inputs.len().div_ceil(4) * 4, 0.0);
    let words = inputs.len() / 4;
    let x = client.create_from_slice(f32::as_bytes(&inputs));
    let out = client.empty(words * 4);
    let cube = CubeDim::new_1d(64);
    let count = CubeCount::Static(words.div_ceil(64) as u32, 1, 1);
    unsafe {
        encode_e4m3_kernel::launch_unchecked(
            &client,
            count,
            cube,
            AddressType::U32,
            4,
            TensorArg::from_raw_parts(x, [1].into(), [inputs.len()].into()),
            TensorArg::from_raw_parts(out.clone(), [1].into(), [words].into()),
            1.0,
        );
    }
    let bytes = client.read_one(out).unwrap();
    for (i, (x, &code)) in g.inputs.iter().zip(&g.codes).enumerate() {
        let got = bytes[i];
        let ok = got == code || (x.is_nan() && got & 0x7F == 0x7F);
        assert!(ok, "kernel encode({x:e}) = {got:#04x}, want {code:#04x}");
    }
    // Decode: all 256 codes, in 64 words, scale 1, through the integer codec, f16 halves (where
    // the device takes them: `Fp8Decode::on_device`) and CubeCL's fp8 type (the device's conversion, or CubeCL's software
    // codec where it has none).
    let codes: Vec<u8> = (0..=255).collect();
    let decodes = [Fp8Decode::Integer, Fp8Decode::Halves, Fp8Decode::Native];
    for decode in decodes {
        if decode.on_device(&client) != decode {
            eprintln!(
                "fp8 kernel test: {decode:?} not run, {} does not take it",
                client.name()
            );
            continue;
        }
        let w = client.create_from_slice(&codes);
        let out = client.empty(256 * 4);
        unsafe {
            decode_e4m3_kernel::launch_unchecked(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(64),
                AddressType::U32,
                4,
                TensorArg::from_raw_parts(w, [1].into(), [64].into()),
                TensorArg::from_raw_parts(out.clone(), [1].into(), [256].into()),
                1.0,
                decode,
            );
        }
        let values = f32::from_bytes(&client.read_one(out).unwrap()).to_vec();
        for (code, (got, want)) in values.iter().zip(&g.decoded).enumerate() {
            assert!(
                same(*got, *want),
                "kernel decode({code:#04x}, {decode:?}) = {got:e}, want {want:e}"
            );
        }
    }
}
