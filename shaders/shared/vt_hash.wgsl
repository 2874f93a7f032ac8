// The 32-bit mix (lowbias32) the virtual-texture page table and the feedback set hash
// keys with; src/vt/page_table.rs has its CPU twin.
fn vt_hash(key: u32) -> u32 {
    var h = key;
    h ^= h >> 16u;
    h *= 0x7feb352du;
    h ^= h >> 15u;
    h *= 0x846ca68bu;
    h ^= h >> 16u;
    return h;
}
