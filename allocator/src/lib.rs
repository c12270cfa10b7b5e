//! mlcc's global allocator, shared by mlccd, mlcc-switchd and mlcc-sim: mimalloc (version 2),
//! asked for a plain block whenever the layout's alignment is one every block has.
//!
//! The `mimalloc` crate's allocator asks for every block through mimalloc's aligned entry
//! points; for an ordinary alignment those check the alignment and then take the plain path
//! anyway, which cost about a fifth of each allocation's instructions in mlccd's slot. This
//! one calls `mi_malloc` directly where that is sound, as the standard library's own `System`
//! allocator calls `malloc`.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every mimalloc block has (`MI_MAX_ALIGN_SIZE` in mimalloc's `types.h`)
/// once it is at least this large: a block of fewer bytes is aligned to its size class only.
const PLAIN_ALIGN: usize = 16;

/// mimalloc as the global allocator:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: mlcc_alloc::MlccAlloc = mlcc_alloc::MlccAlloc;
///
/// fn main() {
///     let v: Vec<u64> = (0..100).collect();
///     assert_eq!(v.iter().sum::<u64>(), 4950);
/// }
/// ```
pub struct MlccAlloc;

/// Whether a plain block of `layout.size()` bytes is aligned enough for `layout`.
fn plain(layout: &Layout) -> bool {
    layout.align() <= PLAIN_ALIGN && layout.align() <= layout.size()
}

/// A block for `layout` from `plain` where a plain block is aligned enough, else from
/// `aligned` (inlined into each caller, so the choice is a branch, not an indirect call).
///
/// # Safety
/// `plain` and `aligned` must be mimalloc's matching entry points.
#[inline(always)]
unsafe fn block(
    layout: Layout,
    plain_fn: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned_fn: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: the caller passes mimalloc's functions, which accept any size.
    unsafe {
        if plain(&layout) {
            plain_fn(layout.size()) as *mut u8
        } else {
            aligned_fn(layout.size(), layout.align()) as *mut u8
        }
    }
}

// SAFETY: every block comes from mimalloc and goes back to it; a layout whose alignment a
// plain block may not have is served by mimalloc's aligned entry points.
unsafe impl GlobalAlloc for MlccAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions accept any size.
        unsafe { block(layout, ffi::mi_malloc, ffi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { block(layout, ffi::mi_zalloc, ffi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from mimalloc.
        unsafe { ffi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from mimalloc; the new block keeps the layout's alignment (a plain
        // one only where the new size also allows it).
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, layout.align());
            if plain(&new) {
                ffi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                ffi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// Every layout gets a block aligned as it asked, across the plain and aligned paths and
    /// through growth and shrinking.
    #[test]
    fn blocks_are_aligned_as_asked() {
        let a = MlccAlloc;
        let mut blocks = Vec::new();
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 3, 8, 15, 16, 17, 100, 1000, 70_000] {
                let l = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed below with its layout.
                unsafe {
                    let p = a.alloc(l);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xa5, size);
                    let z = a.alloc_zeroed(l);
                    assert_eq!(z as usize % align, 0, "zeroed: size {size} align {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    let grown = a.realloc(p, l, size * 3);
                    assert_eq!(
                        grown as usize % align,
                        0,
                        "grown: size {size} align {align}"
                    );
                    assert!(
                        (0..size).all(|i| *grown.add(i) == 0xa5),
                        "grown keeps its bytes"
                    );
                    let gl = Layout::from_size_align(size * 3, align).unwrap();
                    let shrunk = a.realloc(grown, gl, size.div_ceil(2));
                    assert_eq!(
                        shrunk as usize % align,
                        0,
                        "shrunk: size {size} align {align}"
                    );
                    blocks.push((
                        shrunk,
                        Layout::from_size_align(size.div_ceil(2), align).unwrap(),
                    ));
                    blocks.push((z, l));
                }
            }
        }
        for (p, l) in blocks {
            // SAFETY: each block was allocated above with this layout.
            unsafe { a.dealloc(p, l) }
        }
    }
}
