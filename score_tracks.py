"""Score multi-object tracks against ground truth, both in MOTChallenge's text format (frame,id,x,y,w,h,conf,...):
HOTA, MOTA, IDF1 and ID switches, computed with TrackEval as the MOTChallenge benchmark does for one sequence.
Several trackers are reported side by side, a row each; given folders, each tracker's mean over the sequences.

Usage:
    python score_tracks.py --gt seq/gt/gt.txt --tracks runs/detect/exp/tracks/seq.txt [more.txt ...]
    python score_tracks.py --gt gt.txt --tracks a.txt --min-visibility 0.25   # ignore mostly hidden objects
    python score_tracks.py --gt synth/ --tracks ours/ theirs/   # synth/<seq>/gt/gt.txt, ours/<seq>.txt: the mean
    python score_tracks.py --gt synth/ --tracks ours/ theirs/ --per-sequence   # and a row per sequence
"""

from pathlib import Path

from utils.cli import Parser, float_in, run_cli
from utils.errors import MetricsError
from utils.track.mot_eval import format_table, mean_columns, read_mot, score_tracks, sequence_names, tracker_files


def score_sequence(gt_file: str, track_files: list[str], min_visibility: float) -> str:
    """One sequence: a row per track file."""
    gt = read_mot(gt_file)
    rows = [(path, score_tracks(gt, read_mot(path), min_visibility).columns()) for path in track_files]
    return format_table(rows)


def score_folders(gt_folder: str, track_folders: list[str], min_visibility: float, per_sequence: bool) -> str:
    """Several sequences: a row per tracker folder with its mean over the sequences (and, per_sequence, a row per
    tracker and sequence before them)."""
    sequences = sequence_names(gt_folder)
    files = {folder: tracker_files(folder, sequences) for folder in track_folders}  # all checked before scoring
    gts = [read_mot(Path(gt_folder) / name / "gt" / "gt.txt") for name in sequences]
    scores = {
        folder: [score_tracks(g, read_mot(f), min_visibility) for g, f in zip(gts, files[folder])] for folder in files
    }
    text = ""
    if per_sequence:
        rows = [(f"{folder} {name}", s.columns()) for folder in scores for name, s in zip(sequences, scores[folder])]
        text = format_table(rows) + "\n\n"
    means = [(folder, mean_columns(scores[folder])) for folder in scores]
    return text + f"mean over {len(sequences)} sequences:\n" + format_table(means, whole_counts=False)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description="Score MOTChallenge-format tracks against ground truth (HOTA, MOTA, IDF1, IDsw)")
    parser.add_argument("--gt", required=True, help="ground truth gt.txt, or a folder of <sequence>/gt/gt.txt")
    parser.add_argument("--tracks", nargs="+", required=True, help="track files, or folders of <sequence>.txt")
    parser.add_argument(
        "--min-visibility", type=float_in(0, 1), default=0.0, help="ignore ground truth less visible than this"
    )
    parser.add_argument("--per-sequence", action="store_true", help="with folders: also a row per sequence")
    args = parser.parse_args(argv)
    if Path(args.gt).is_dir():
        files = [t for t in args.tracks if not Path(t).is_dir()]
        if files:
            raise MetricsError(f"--gt {args.gt} is a folder of sequences: --tracks must be folders too, not {files[0]}")
        print(score_folders(args.gt, args.tracks, args.min_visibility, args.per_sequence))
    else:
        folders = [t for t in args.tracks if Path(t).is_dir()]
        if folders:
            raise MetricsError(
                f"{folders[0]} is a folder: to score folders of tracks, --gt must be a folder of sequences"
            )
        print(score_sequence(args.gt, args.tracks, args.min_visibility))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
