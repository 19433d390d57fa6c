"""Writes the COURSE_EXPORT entry points of benchmarks/day07_skinny_sweep/splitk.cu (between BEGIN/END EXPORTS)."""
import re
from pathlib import Path

# (RG, KS, K_TILE, MTOK, STAGES, BULK)
CONFIGS = [
    # tokens padded to 8 (M <= 8)
    (4, 2, 128, 8, 4, False),   # 64 rows, 8 warps, 3 blocks/SM, 144 KB of weight in flight per SM
    (4, 2, 128, 8, 6, False),   # 2 blocks/SM, 160 KB in flight
    (4, 2, 256, 8, 4, False),   # 1 block/SM, 96 KB, 512-byte row pieces
    (2, 4, 256, 8, 4, False),   # 32 rows, 2 blocks/SM, 96 KB
    (2, 2, 128, 8, 8, False),   # 32 rows, 4 warps, 2 blocks/SM, 112 KB
    (1, 4, 512, 8, 4, False),   # the reference's M <= 8 shape, under the new schedule
    (4, 2, 128, 8, 4, True),    # bulk copies, 2 blocks/SM
    (2, 4, 256, 8, 4, True),    # bulk copies, 2 blocks/SM
    # tokens padded to 16 (M <= 16)
    (4, 2, 128, 16, 5, False),  # 64 rows: x = 1/4 of the weight bytes; 2 blocks/SM, 128 KB in flight
    (4, 2, 128, 16, 4, False),  # 2 blocks/SM, 96 KB
    (8, 1, 64, 16, 6, False),   # 128 rows (x = 1/8), 128-byte row pieces, 2 blocks/SM, 160 KB
    (8, 2, 128, 16, 4, False),  # 128 rows, 16 warps, 1 block/SM, 96 KB
    (2, 4, 256, 16, 4, False),  # 32 rows, 2 blocks/SM
    (1, 8, 512, 16, 3, False),  # the reference's M = 16 shape, under the new schedule
    (4, 2, 128, 16, 4, True),   # bulk copies, 2 blocks/SM
]


def name(c):
    rg, ks, kt, mt, st, bulk = c
    return f"rg{rg}_ks{ks}_t{kt}_m{mt}_s{st}_{'bulk' if bulk else 'cp'}"


def main():
    path = Path(__file__).with_name("splitk.cu")
    text = path.read_text()
    lines = []
    for c in CONFIGS:
        rg, ks, kt, mt, st, bulk = c
        args = f"{rg}, {ks}, {kt}, {mt}, {st}, {'true' if bulk else 'false'}"
        lines.append(f"COURSE_EXPORT cudaError_t sk_{name(c)}(void* y, const void* x, const void* w, int64_t M, int64_t N, "
                     f"int64_t K, int64_t split, bool fp16, cudaStream_t stream) {{\n"
                     f"  return splitk::dispatch<{args}>(y, x, w, M, N, K, split, fp16, stream);\n}}")
        lines.append(f"COURSE_EXPORT int64_t info_{name(c)}(int64_t what) {{ return splitk::info<{args}>(what); }}")
    new = re.sub(r"// BEGIN EXPORTS\n.*?// END EXPORTS\n", "// BEGIN EXPORTS\n" + "\n".join(lines) + "\n// END EXPORTS\n",
                 text, flags=re.S)
    path.write_text(new)
    print(f"{len(CONFIGS)} configs written to {path}")


if __name__ == "__main__":
    main()
