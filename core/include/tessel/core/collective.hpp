// The collectives a Program can contain and the algorithms that carry them out. The
// vocabulary lives in core because plans lower to it; what each costs (bus factors,
// latency steps, fitted bandwidth) is profiles' business.
#pragma once

namespace tessel {

enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast, reduce, send_recv, all_to_all };

// Ring: n-1 (or 2(n-1)) latency steps; tree / recursive doubling: ceil(log2 n) (or 2x).
enum class CollectiveAlgorithm { ring, tree };

}  // namespace tessel
