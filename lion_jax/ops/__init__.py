"""LION's maths as pure, jittable functions: no parameters, no modules (`lion_jax.nn` has those).

  masks             the mask M, its gates and conventions, the shape legend
  decay             decay parameterisations and their HiPPO initialisation
  attention         `lion_attention`: the five forms, one entry point
  recurrent         causal decayed linear attention (rnn, associative scan, causal chunks)
  chunkwise         the bidirectional `chunk_scan` kernel (exact C×C blocks plus chunk states)
  factored          its vector-decay kernel with a hand-written backward pass
  fused_chunks      that kernel's per-chunk work as Pallas kernels (opt-in)
  recomputed        `chunk_scan` that keeps only its inputs for the backward pass
  context_parallel  `chunk_scan` with the sequence split over devices
  segments          packed rows: several examples in one row
  grid_order        LION♮: decays along snake orders of an image
  rotation          complex decays λ e^{iθ}: the plain sum with a rotation per token
  barrier           XLA:CPU's gradient barrier

Which function runs, and the measurement that chose it (docs/benchmarks.md §N):

  attention, or auto with L ≤ C   `_attention`, the whole [B, H, G, L, L] mask (one chunk: the
                                  same work as chunk_scan, without its scan)
  rnn / scan                      `recurrent.bidirectional` over `causal_rnn` (O(L) memory) /
                                  `causal_associative_scan` (log depth, a GPU tool); on a CPU
                                  scan runs `causal_rnn` too (state_pass "auto": fwd+bwd
                                  2-2.5x faster at L = 1,024, K = 4, E = 8)
  complex decays (`rotation`)     rnn / scan: complex gates log λ + iθ in the recurrence
                                  (`phase`); other forms rotate values and outputs by e^{∓iΘ}
  chunk                           `_chunked_queries`, the paper's LION-Chunk (C.10)
  chunk_scan, stored residuals:
    one decay per head            `chunkwise._chunk_kernel` with an exact C×C mask a chunk
    vector decays                 `factored.factored_chunks` (its blocks are matmuls; its own
                                  backward pass, since autodiff's scatters cost 12-15%, §1),
                                  steep chunks exact on the side; beyond
                                  `chunkwise.steep_chunk_capacity` the exact masks
    in `factored.fused_kernels()` `fused_chunks` Pallas kernels: level time, 29% less memory
                                  on an H100 (§11); opt-in
  chunk_scan, recomputed          `recomputed.recomputed_chunk_scan` (auto beyond
                                  `recomputed.SEGMENT_MAX` tokens: 2.9-3.3x less memory for
                                  0.87-1.0x the time on a CPU, §10)
  chunk_scan, sequence_axis       `context_parallel`, stored or recomputed (§8)
  chunk_scan's state pass         `lax.scan` on a CPU (the associative pass 5-14% slower, §9),
                                  log-depth associative elsewhere (1.36-1.40x on an H200, §11)
  segment_ids                     `segments.separate_examples` lowers each example's first
                                  gate, then any of the above (§12)
  split_directions                `_attention` / `_chunked_queries` with side weights, or
                                  `recurrent.bidirectional_halves` over rnn, scan or
                                  `causal_chunk_scan` (chunk_scan; C ≤ 8 on a CPU,
                                  `recurrent.CAUSAL_CHUNK_CPU`)

Shapes follow the legend in `lion_jax.ops.masks`.
"""
