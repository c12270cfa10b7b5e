//! [`Booked`]: what each entry of a link booked, in fixed point, beside the link's slab and in
//! the slab's order, K cells per entry in one array. The precedence walk and the first-rate
//! sums read only this: a compact array rather than each entry and the heap vector its rates
//! sat in (paper-fig15 spent a quarter of its run in that walk, most of it waiting on those
//! loads). Each place also carries a tag of its publisher's name, so that the walk can tell
//! the asking host's entries without reading their names.

use super::order::fixed;

#[derive(Clone, Debug)]
pub(super) struct Booked {
    /// Cells per entry: the horizon K, the most slots an update may book.
    stride: usize,
    /// Per slab place: the first slot booked, how many slots are, and the publisher's tag.
    spans: Vec<Span>,
    /// Per slab place, `stride` cells; those past its span are zero.
    cells: Vec<i128>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    first: u64,
    len: usize,
    tag: u64,
}

impl Booked {
    pub fn new(stride: usize) -> Self {
        Booked {
            stride,
            spans: Vec::new(),
            cells: Vec::new(),
        }
    }

    /// Appends a place for `rates` from slot `first`, published by a host whose name has
    /// `tag`. Rates past K are not kept: the table refuses such updates before they reach a
    /// link.
    pub fn push(&mut self, first: u64, rates: &[f64], tag: u64) {
        let n = rates.len().min(self.stride);
        self.spans.push(Span { first, len: n, tag });
        self.cells.extend(rates[..n].iter().map(|&r| fixed(r)));
        self.cells.extend(std::iter::repeat_n(0, self.stride - n));
    }

    /// Rewrites place `h` with `rates` from slot `first`; its publisher stays.
    pub fn set(&mut self, h: usize, first: u64, rates: &[f64]) {
        let n = rates.len().min(self.stride);
        let span = &mut self.spans[h];
        (span.first, span.len) = (first, n);
        let cells = &mut self.cells[h * self.stride..(h + 1) * self.stride];
        for (c, r) in cells.iter_mut().zip(rates[..n].iter().map(|&r| fixed(r))) {
            *c = r;
        }
        cells[n..].fill(0);
    }

    /// Removes place `h`; the last place moves into it, as the slab's last entry does.
    pub fn swap_remove(&mut self, h: usize) {
        self.spans.swap_remove(h);
        let last = self.cells.len() - self.stride;
        if h * self.stride != last {
            self.cells
                .copy_within(last..last + self.stride, h * self.stride);
        }
        self.cells.truncate(last);
    }

    /// Place `h`'s first slot and its booked cells, one per slot from there.
    pub fn get(&self, h: usize) -> (u64, &[i128]) {
        let Span { first, len, .. } = self.spans[h];
        let at = h * self.stride;
        (first, &self.cells[at..at + len])
    }

    /// Place `h`'s publisher's tag.
    pub fn tag(&self, h: usize) -> u64 {
        self.spans[h].tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_follow_the_slab_through_removals_and_rewrites() {
        let mut b = Booked::new(3);
        b.push(10, &[1.0, 2.0], 100);
        b.push(11, &[3.0, 4.0, 5.0], 101);
        b.push(12, &[6.0], 102);
        b.set(0, 13, &[7.0]);
        assert_eq!(b.get(0), (13, &[fixed(7.0)][..]));
        assert_eq!(b.tag(0), 100, "a rewrite keeps the publisher");
        b.swap_remove(0);
        // The last place moved into the first, with its span, tag and cells.
        assert_eq!(b.get(0), (12, &[fixed(6.0)][..]));
        assert_eq!(b.tag(0), 102);
        assert_eq!(b.get(1), (11, &[fixed(3.0), fixed(4.0), fixed(5.0)][..]));
        b.swap_remove(1);
        b.swap_remove(0);
        assert!(b.spans.is_empty() && b.cells.is_empty());
    }

    #[test]
    fn a_rewrite_to_fewer_slots_leaves_no_stale_cells() {
        let mut b = Booked::new(3);
        b.push(5, &[1.0, 2.0, 3.0], 0);
        b.set(0, 6, &[4.0]);
        assert_eq!(b.get(0), (6, &[fixed(4.0)][..]));
        assert_eq!(b.cells, [fixed(4.0), 0, 0]);
    }
}
