#!/usr/bin/env python3
"""Write the text or the audio example of items that are not images
(:mod:`rdx.examples_items`): ``python scripts/items_example.py text --out DIR``, then
``rdx explain DIR/A.npy DIR/B.npy --texts DIR/texts.txt ...`` (or ``audio`` and
``--audio DIR/clips``)."""
import argparse
import sys
from pathlib import Path

try:
    import rdx  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["text", "audio"],
                   help="text: 600 template sentences whose colour model B cannot see; "
                        "audio: 120 synthesized tones whose timbre model B cannot hear")
    p.add_argument("--out", required=True, help="folder to write (created)")
    p.add_argument("--seed", type=int, default=0, help="seed (default %(default)s)")
    args = p.parse_args(argv)
    from rdx.examples_items import make_audio_example, make_text_example

    make = make_text_example if args.kind == "text" else make_audio_example
    out = make(args.out, seed=args.seed)
    items = f"--texts {out}/texts.txt" if args.kind == "text" else f"--audio {out}/clips"
    print(f"wrote {out}: A.npy, B.npy, labels.npy, metadata.csv and the items; next:\n"
          f"  rdx explain {out}/A.npy {out}/B.npy {items} --labels {out}/labels.npy "
          f"--metadata {out}/metadata.csv --out {out}/result --report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
