"""Score multi-object tracks against ground truth, both in MOTChallenge's text format (frame,id,x,y,w,h,conf,...):
HOTA, MOTA, IDF1 and ID switches, computed with TrackEval as the MOTChallenge benchmark does for one sequence.

Usage:
    python score_tracks.py --gt seq/gt/gt.txt --tracks runs/detect/exp/tracks/seq.txt [more.txt ...]
    python score_tracks.py --gt gt.txt --tracks a.txt --min-visibility 0.25   # ignore mostly hidden objects
"""

from utils.cli import Parser, float_in, run_cli
from utils.track.mot_eval import read_mot, score_tracks


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description="Score MOTChallenge-format tracks against ground truth (HOTA, MOTA, IDF1, IDsw)")
    parser.add_argument("--gt", required=True, help="ground truth: frame,id,x,y,w,h,consider,class,visibility")
    parser.add_argument("--tracks", nargs="+", required=True, help="track files: frame,id,x,y,w,h,conf,-1,-1,-1")
    parser.add_argument(
        "--min-visibility", type=float_in(0, 1), default=0.0, help="ignore ground truth less visible than this"
    )
    args = parser.parse_args(argv)
    gt = read_mot(args.gt)
    for path in args.tracks:
        scores = score_tracks(gt, read_mot(path), args.min_visibility)
        print(f"{path}: {scores.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
