"""From records to numbers: where each scale's optimum lies, how far it moves, and how sure we are.

Reads records only (never the engine). A module per step: `records` (the runs of
every record below a folder, as one table), `grouping` (which runs form one family of
LR curves, and what names it), `versions` (a group's runs by the version of its data
and model files), `statistics` (optima, drift and its interval, transfer cost),
`verdicts` (the interval in one word, firm or tentative), `resampling` (the seeds or
the curve noise, redrawn, for the intervals), `joint` (a second inner axis),
`prediction` (the optimum at a new scale) and `summary` (groups as plain data for JSON
and tables); `group` composes the statistics for one group.

What this folder may import: `store` (reading records), `config` (a record's inner
grid, which keys are run settings), `errors`. Never the engine, the sweep or the
figures.
"""

from lrtransfer.analysis.group import Group, analyse, groups, scanned_groups
from lrtransfer.analysis.grouping import SHOWN, config_columns, partition, scale_axis, telling_keys, versioned
from lrtransfer.analysis.records import (
    HISTORY_COLUMNS,
    JOB_COLUMNS,
    METRICS,
    RUN_COLUMNS,
    SCALE_AXES,
    NoRecordsError,
    Scan,
    Skipped,
    SkippedRecordWarning,
    check_metric,
    export_frame,
    load_runs,
    maximizes,
    metric_noun,
    scan,
    scan_runs,
)
from lrtransfer.analysis.statistics import (
    CONFIDENCE,
    EDGE_HIGH,
    EDGE_LOW,
    FLAT,
    INTERIOR,
    LOCATED,
    N_RESAMPLES,
    NEAR_DIVERGENCE,
    NONE,
    Fit,
    Optima,
    ScaleOptima,
    curves,
    drift,
    subgrid_optima,
    t_quantile,
    transfer_cost,
)
from lrtransfer.analysis.verdicts import (
    FIRM_SCALES,
    FIRM_SEEDS,
    FIRM_VERDICTS,
    TOLERANCE,
    VERDICTS,
    firm_evidence,
    verdict,
    verdict_text,
)
from lrtransfer.analysis.resampling import curve_noise
from lrtransfer.analysis.summary import group_dict, overview, summarize, summary_doc

__all__ = [
    "CONFIDENCE", "EDGE_HIGH", "EDGE_LOW", "FIRM_SCALES", "FIRM_SEEDS", "FIRM_VERDICTS", "FLAT", "HISTORY_COLUMNS", "INTERIOR", "JOB_COLUMNS",
    "LOCATED", "METRICS", "N_RESAMPLES", "NEAR_DIVERGENCE", "NONE", "RUN_COLUMNS", "SCALE_AXES", "SHOWN", "TOLERANCE",
    "VERDICTS", "Fit", "Group", "NoRecordsError", "Optima", "ScaleOptima", "Scan", "Skipped", "SkippedRecordWarning",
    "analyse", "check_metric", "config_columns", "curve_noise", "curves", "drift", "export_frame", "firm_evidence",
    "group_dict", "groups", "load_runs", "maximizes", "metric_noun", "overview", "partition", "scale_axis", "scan",
    "scan_runs", "scanned_groups", "subgrid_optima", "summarize", "summary_doc", "t_quantile", "telling_keys",
    "transfer_cost", "verdict", "verdict_text",
    "versioned",
]
