"""Convert a dataset labelled by COCO JSON or Pascal VOC XML into YOLO text labels, in a new folder.

Usage:
    python convert_dataset.py --data coco_json.yaml --out ../datasets/mydata-yolo          # images linked
    python convert_dataset.py --data voc.yaml --out ../datasets/voc-yolo --copy            # images copied
    python convert_dataset.py --data coco_json.yaml --out ../datasets/mydata-seg --segments  # polygon rows

The data YAML names the COCO JSON / VOC splits as training would use them (docs/datasets.md); the output holds
images/<split>/ (links to the source images, or copies), labels/<split>/*.txt and data.yaml (plus the COCO JSON
of the val split as ann_json). The output folder must not exist yet (or be empty) and may not overlap the source:
nothing is ever written into the dataset being converted. Training on the output gives the same numbers as
training on the annotations directly.
"""

import argparse
import sys

from utils.cli import Parser, run_cli
from utils.data.convert import ConvertOptions, convert_dataset


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: --data, --out, --copy, --segments."""
    parser = Parser(description="Convert a COCO JSON / Pascal VOC dataset into YOLO text labels, in a new folder")
    parser.add_argument("--data", required=True, help="data YAML naming COCO JSON or VOC splits")
    parser.add_argument("--out", required=True, help="new folder to write the YOLO dataset into")
    parser.add_argument("--copy", action="store_true", help="copy the images instead of linking them")
    parser.add_argument(
        "--segments", action="store_true", help="polygon label rows (COCO outlines), for segment models"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Parse the options and convert; 1 with one ERROR line for a bad input."""
    opt = parse_opt(argv)
    options = ConvertOptions(data=opt.data, out=opt.out, copy=opt.copy, segments=opt.segments)
    return run_cli(lambda: print(convert_dataset(options).yaml_file))


if __name__ == "__main__":
    sys.exit(main())
