//! A writer of Python's pickle format (protocol 2), for the few types a memory snapshot
//! needs: dicts with string keys, lists, tuples, strings, integers and booleans.
//!
//! Only opcodes that both Python's `pickle` and the unpickler of PyTorch's memory_viz page
//! read are written; lists and dicts go out in batches of 1000, as Python's own pickler
//! writes them (memory_viz's unpickler spreads a batch into one call's arguments).

/// A value to pickle.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Keys in the order given.
    Dict(Vec<(&'static str, Value)>),
}

/// Items per `APPENDS` or `SETITEMS`.
const BATCH: usize = 1000;

/// `value` as a protocol-2 pickle.
pub(crate) fn to_pickle(value: &Value) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    write(&mut out, value);
    out.push(b'.');
    out
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(true) => out.push(0x88),
        Value::Bool(false) => out.push(0x89),
        Value::Int(i) => match *i {
            0..=0xff => out.extend_from_slice(&[b'K', *i as u8]),
            0x100..=0xffff => {
                out.push(b'M');
                out.extend_from_slice(&(*i as u16).to_le_bytes());
            }
            i if i32::try_from(i).is_ok() => {
                out.push(b'J');
                out.extend_from_slice(&(i as i32).to_le_bytes());
            }
            i => {
                // LONG1: the shortest little-endian two's complement.
                let bytes = i.to_le_bytes();
                let mut n = 8;
                while n > 1 {
                    let top = bytes[n - 1];
                    let below_sign = bytes[n - 2] & 0x80;
                    if (top == 0 && below_sign == 0) || (top == 0xff && below_sign != 0) {
                        n -= 1;
                    } else {
                        break;
                    }
                }
                out.extend_from_slice(&[0x8a, n as u8]);
                out.extend_from_slice(&bytes[..n]);
            }
        },
        Value::Str(s) => write_str(out, s),
        Value::List(items) => {
            out.push(b']');
            for chunk in items.chunks(BATCH) {
                out.push(b'(');
                for item in chunk {
                    write(out, item);
                }
                out.push(b'e');
            }
        }
        Value::Tuple(items) => {
            out.push(b'(');
            for item in items {
                write(out, item);
            }
            out.push(b't');
        }
        Value::Dict(entries) => {
            out.push(b'}');
            for chunk in entries.chunks(BATCH) {
                out.push(b'(');
                for (k, v) in chunk {
                    write_str(out, k);
                    write(out, v);
                }
                out.push(b'u');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_the_shortest_opcode_and_long1_keeps_the_sign() {
        assert_eq!(to_pickle(&Value::Int(7)), [0x80, 2, b'K', 7, b'.']);
        assert_eq!(to_pickle(&Value::Int(300)), [0x80, 2, b'M', 44, 1, b'.']);
        assert_eq!(
            to_pickle(&Value::Int(-2)),
            [0x80, 2, b'J', 0xfe, 0xff, 0xff, 0xff, b'.']
        );
        // 2^40 takes six bytes; 2^39 too: its fifth byte has the top bit set, so a zero
        // byte above keeps it positive.
        assert_eq!(
            to_pickle(&Value::Int(1 << 40)),
            [0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0, 1, b'.']
        );
        assert_eq!(
            to_pickle(&Value::Int(1 << 39)),
            [0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0x80, 0, b'.']
        );
        assert_eq!(
            to_pickle(&Value::Int(-(1 << 39))),
            [0x80, 2, 0x8a, 5, 0, 0, 0, 0, 0x80, b'.']
        );
    }
}
