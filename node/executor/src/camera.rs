//! The simulated device's camera: a small PNG frame of each effect, so the demo's operations
//! carry an image as evidence the way a site's camera would. The frame is PNG's plainest valid
//! form — 8-bit RGB rows, zlib "stored" (uncompressed) blocks, CRC-32 and Adler-32 — so no
//! image library is needed for a picture of a few kilobytes.

/// Frame size in pixels.
pub const WIDTH: usize = 96;
pub const HEIGHT: usize = 64;

/// A frame of the press after an effect: a grey bed, a ram lowered to a height and tinted by
/// `seed` (the operation id), so two operations' frames differ.
pub fn frame(seed: &[u8]) -> Vec<u8> {
    let h = seed.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193));
    let ram_bottom = 12 + (h % 36) as usize;
    let tint = [(h >> 8) as u8 | 0x40, (h >> 16) as u8 | 0x40, 0x30];
    let mut raw = Vec::with_capacity(HEIGHT * (1 + 3 * WIDTH));
    for y in 0..HEIGHT {
        raw.push(0); // the row's filter: none
        for x in 0..WIDTH {
            let ram = y < ram_bottom && (24..72).contains(&x);
            let bed = y >= HEIGHT - 8;
            let pixel = if ram {
                tint
            } else if bed {
                [0x70, 0x70, 0x70]
            } else {
                [0xf4, 0xf4, 0xf0]
            };
            raw.extend_from_slice(&pixel);
        }
    }
    png(WIDTH as u32, HEIGHT as u32, &raw)
}

/// A PNG of filtered RGB rows `raw`.
fn png(width: u32, height: u32, raw: &[u8]) -> Vec<u8> {
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit depth, RGB, deflate, adaptive filters, no interlace
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib_stored(raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// `data` as a zlib stream of stored deflate blocks (at most 65,535 bytes each).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = data.chunks(0xffff).collect();
    for (i, block) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for d in data {
        a = (a + u32::from(*d)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksums_are_the_standard_ones() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn a_frame_is_a_png_whose_chunks_check() {
        let png = frame(b"op-1");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let mut at = 8;
        let mut kinds = Vec::new();
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let body = &png[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(body), crc, "chunk {:?}", &body[..4]);
            kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
            at += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        assert_ne!(frame(b"op-1"), frame(b"op-2"), "frames of different operations differ");
    }
}
