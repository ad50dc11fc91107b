"""The catalogue of bad input: each gives one line naming the value (and the valid
choices), a non-zero exit, no traceback, and loses nothing already written.

docs/troubleshooting.md lists the same cases.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY
from tests.conftest import copy_study as _copy

NO_CUDA = not torch.cuda.is_available()
NANOGPT = Path(__file__).parent / "nanogpt_standin.py"  # nanoGPT's GPT: its table tied to the readout
LOOSE = Path(__file__).parent / "loose_net.py"  # a matrix outside any layer

# (case, sweep arguments, the fragment the one-line error must contain)
CATALOGUE = [
    ("unknown group option", ["model=perceiver"], "unknown option 'perceiver' for model; valid: cnn, cnn1d, custom, mlp, resnet, resnet_cnn, transformer"),
    ("misspelt group option", ["optim=adamw"], "unknown option 'adamw' for optim (did you mean 'adam'?); valid: adam, muon, sgd"),
    ("unknown key", ["widht=64"], "unknown key 'widht' (did you mean 'width'?)"),
    ("unknown nested key", ["train.stpes=3"], "unknown key 'train.stpes' in 'train' (did you mean 'steps'?)"),
    ("wrong type", ["width=abc"], "width: Value 'abc' of type 'str' could not be converted to Integer"),
    ("wrong choice", ["train.schedule=cosin"], "train.schedule: Invalid value 'cosin', expected one of [constant, linear, cosine]"),
    ("non-positive width", ["width=0"], "width must be positive, got 0"),
    ("non-positive width inside a sweep", ["width=64,0"], "width must be positive, got 0 (job width=0"),
    ("non-positive depth", ["depth=0"], "depth must be positive"),
    ("too shallow for the model", ["depth=1"], "depth=1: model=mlp needs depth >= 2"),
    ("non-positive steps", ["train.steps=-5"], "train.steps must be positive"),
    ("non-positive batch", ["train.batch_size=0"], "train.batch_size must be positive"),
    ("inverted LR grid", ["lr.log2_min=-2", "lr.log2_max=-8"], "empty LR grid: lr.log2_min=-2.0 is above lr.log2_max=-8.0"),
    ("zero LR step", ["lr.log2_step=0"], "lr.log2_step must be positive"),
    ("unknown device", ["engine.device=gpu"], "engine.device='gpu' is not one of: auto, cpu, cuda, cuda:N"),
    ("unparsable override", ["width=["], "cannot parse override 'width=['"),
    ("an = in a value", ["name=a=b"], "cannot parse override 'name=a=b': mismatched input '='"),
    ("an option sweep does not have", ["--metric", "bogus"],
     "unknown option --metric for sweep; valid: --plan, --rerun, --until-decided, --budget, --cfg job"),
    ("a --cfg Hydra has not", ["--cfg", "nope"], "argument --cfg/-c: invalid choice: 'nope' (choose from 'job', 'hydra', 'all')"),
    ("an --info Hydra has not", ["--info", "nope"], "argument --info/-i: invalid choice: 'nope' (choose from 'all', 'config', "),
    ("a value where a section belongs", ["train=5"],
     "train=5: train is a section of keys (steps, batch_size, schedule, warmup_steps,"),
    ("a ~ the shell left alone", ["data.root=~/data"],
     "cannot parse override: LexerNoViableAltException: data.root=~/data; write the path with $HOME, or quote it"),
    ("dataset not on disk", ["data=cifar10", "data.root={tmp}/nodata"],
     "data=cifar10: CIFAR-10 not found: no data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch in {tmp}/nodata/cifar-10-batches-py/; extract cifar-10-python.tar.gz"),
    ("corrupt dataset file", ["data=cifar10", "data.root={cifar}"], "data_batch_1: not a readable CIFAR batch file"),
    ("subset larger than the dataset", ["data=mnist", "data.root={cifar}", "data.train_size=101"],
     "data.train_size=101 but MNIST has 100 training images on disk"),
    ("model that cannot read the data", ["data=text"], "model=mlp cannot read data=text, which gives token sequences"),
    ("misspelt tracker", ["tracker=tensorbord"],
     "unknown option 'tensorbord' for tracker (did you mean 'tensorboard'?); valid: mlflow, none, tensorboard, wandb"),
    ("unknown W&B mode", ["tracker=wandb", "tracker.mode=ofline"],
     "tracker.mode: Invalid value 'ofline', expected one of [offline, online]"),
    ("misspelt study", ["study=depht"], "unknown option 'depht' for study (did you mean 'depth'?); valid: batch, batch_examples, depth, horizon, mnist1d, tune, width"),
    ("unknown residual rule", ["model=resnet", "model.residual=half"],
     "model.residual: Invalid value 'half', expected one of [auto, one, sqrt_depth, convex]"),
    ("even conv kernel", ["model=cnn", "data=mnist", "model.kernel_size=4"],
     "model.kernel_size must be a positive odd number (same-size padding), got 4"),
    ("1-D conv net on vectors", ["model=cnn1d"],
     "model=cnn1d cannot read data=teacher, which gives feature vectors; models that can: custom, mlp, resnet"),
    ("even 1-D conv kernel", ["model=cnn1d", "data=mnist1d", "model.kernel_size=4"],
     "model.kernel_size must be a positive odd number (same-size padding), got 4"),
    ("no MNIST-1D signals", ["data=mnist1d", "data.num_samples=0"], "data.num_samples must be >= 10 (one signal per class at least), got 0"),
    ("a signal pooled to nothing", ["model=cnn1d", "data=mnist1d", "depth=6", "model.pool_layers=6"],
     "model=cnn1d halves the signal's length 6 times (depth=6, model.pool_layers=6), but data.final_seq_length=40 leaves nothing"),
    ("width not a multiple of the heads", ["model=transformer", "data=text", "width=30"],
     "width=30 is not divisible by model.heads=4"),
    ("unknown activation", ["model.activation=scaled_tanh"],
     "model.activation: Invalid value 'scaled_tanh', expected one of [auto, relu, gelu, tanh, scaled_relu, scaled_gelu]"),
    ("unknown sensitivity convention", ["param=modular", "param.sensitivity=x"],
     "param.sensitivity: Invalid value 'x', expected one of [modula, lipschitz]"),
    ("Muon on a model without a hidden matrix", ["optim=muon", "depth=2"],
     "optim=muon orthogonalises hidden matrices (width -> width weights), but this model has none; "
     "give it a hidden layer (model=mlp: depth >= 3) or use optim=adam"),
    ("unknown Muon scale", ["optim=muon", "optim.scale=keller"],
     "optim.scale: Invalid value 'keller', expected one of [jordan, moonlight, spectral]"),
    ("zero Newton-Schulz steps", ["optim=muon", "optim.ns_steps=0"], "optim.ns_steps must be positive, got 0"),
    ("muP with Muon's moonlight scale", ["optim=muon", "optim.scale=moonlight", "param=mup"],
     "param=mup has no sound rule for optim.scale=moonlight, whose hidden updates' spectral norm grows as sqrt(width)"),
    ("spectral init of norm 0", ["param=spectral", "param.sigma=0"], "param.sigma must be positive, got 0.0"),
    ("missing config dir", ["--config-dir", "{tmp}/nope"], "config directory"),
    ("YAML error in a config file", ["--config-dir", "{yaml_dir}", "model=broken"], "YAML error in {yaml_dir}/model/broken.yaml, line"),
    ("a config file not in UTF-8", ["--config-dir", "{yaml_dir}", "model=latin"],
     "{yaml_dir}/model/latin.yaml is not UTF-8 text (byte b'\\xe9' at position 32); save it as UTF-8"),
    # values the schema types accept but that mean nothing (issue 15)
    ("beta1 above 1", ["optim.beta1=2"], "optim.beta1 must be in [0, 1), got 2.0"),
    ("beta2 of 1", ["optim.beta2=1"], "optim.beta2 must be in [0, 1), got 1.0"),
    ("negative eps", ["optim.eps=-1"], "optim.eps must be positive, got -1.0"),
    ("negative weight decay", ["optim.weight_decay=-1"], "optim.weight_decay must be >= 0, got -1.0"),
    ("negative momentum", ["optim=sgd", "optim.momentum=-1"], "optim.momentum must be in [0, 1), got -1.0"),
    ("momentum above 1", ["optim=sgd", "optim.momentum=5"], "optim.momentum must be in [0, 1), got 5.0"),
    ("added root key", ["+foo=1"], "unknown key 'foo'; valid: adaptive, data, depth"),
    ("added nested key", ["+train.foo=1"], "unknown key 'train.foo'; valid: batch_size"),
    ("added group key", ["+model.foo=1"], "unknown key 'model.foo'; valid: activation, bias, name"),
    ("deleted key", ["~width"], "key 'width' is required (it cannot be deleted with ~)"),
    ("NaN checkpoint interval", ["engine.checkpoint_s=nan"], "engine.checkpoint_s must be a number of seconds >= 0"),
    ("unknown graphs setting", ["engine.graphs=sometimes"], "engine.graphs='sometimes' is not one of: auto, always, never"),
    ("negative memory budget", ["engine.max_memory_gb=-1"], "engine.max_memory_gb must be"),
    ("infinite memory budget", ["engine.max_memory_gb=inf"], "engine.max_memory_gb must be a finite number of GiB"),
    ("seed past 64 bits", ["seed=99999999999999999999"], "seed=99999999999999999999 is beyond the sane bound of 2^63 - 1"),
    ("data seed past 64 bits", ["data.seed=100000000000000000000"], "data.seed=100000000000000000000 is beyond"),
    ("threads past 64 bits", ["engine.threads=99999999999999999999"], "engine.threads=99999999999999999999 is beyond"),
    ("a million threads", ["engine.threads=1000000"], "engine.threads=1e+06 is beyond the sane bound of 4,096 threads"),
    ("a quadrillion steps", ["train.steps=1000000000000000"], "train.steps=1e+15 is beyond the sane bound of 1,000,000,000"),
    ("history past 64 bits", ["train.history_points=99999999999999999999"], "train.history_points=99999999999999999999"),
    ("width that overflows a size", ["width=1000000000000"], "width=1000000000000 depth=3 train.batch_size=16 data=teacher: "
     "too large to build on this machine (Storage size calculation overflowed"),
    ("teacher input past memory", ["data.input_dim=1000000000000000"], "data=teacher: too large to build on this machine"),
    ("Hydra's sweep folder", ["hydra.sweep.subdir=../../x"], "hydra.sweep.subdir is lrtransfer's to set"),
    ("Hydra's run folder", ["hydra.run.dir={tmp}/elsewhere"], "hydra.run.dir is lrtransfer's to set"),
    ("teacher input_dim 0", ["data.input_dim=0"], "data.input_dim must be positive, got 0"),
    ("teacher classes 0", ["data.classes=0"], "data.classes must be >= 2, got 0"),
    ("teacher temperature 0", ["data.temperature=0"], "data.temperature must be positive, got 0.0"),
    ("teacher eval_size 0", ["data.eval_size=0"], "data.eval_size must be positive, got 0"),
    ("teacher depth 0", ["data.teacher_depth=0"], "data.teacher_depth must be positive, got 0"),
    ("LR far below float range", ["lr.log2_min=-1100"], "lr.log2_min=-1100 is out of range; valid: -100 .. 100"),
    ("LR far above float range", ["lr.log2_max=1100"], "lr.log2_max=1100 is out of range; valid: -100 .. 100"),
    ("infinite LR grid end", ["lr.log2_max=inf"], "lr.log2_max=inf must be a finite number"),
    ("NaN LR grid step", ["lr.log2_step=nan"], "lr.log2_step=nan must be a finite number"),
    # oversized requests, refused before anything is allocated
    ("LR grid of 10^10 points", ["lr.log2_step=1e-9"], "lr.log2_step=1e-09 gives an LR grid of 4000000000 points; at most 10000 runs a job"),
    ("LR grid of 200,001 points", ["lr.log2_min=-10", "lr.log2_max=-8", "lr.log2_step=1e-5"], "gives an LR grid of 200001 points"),
    ("a million seeds", ["n_seeds=1000000"], "n_seeds=1000000 x 5 learning rates = 5000000 runs in a job; at most 10000"),
    ("width beyond memory", ["width=60000"], "width=60000 depth=3 train.batch_size=16: one run needs about"),
    ("batch beyond memory", ["train.batch_size=1000000000"], "train.batch_size=1000000000: one run needs about"),
    ("batch beyond the machine", ["train.batch_size=1000000000", "engine.max_memory_gb=1000000"], "more than this machine's memory"),
    ("depth beyond the bound", ["depth=10000"], "depth=10000 is beyond the sane bound of 1024"),
    # sweeps that expand to nothing, or that the launcher would refuse mid-launch
    ("range with a zero step", ["width=range(16,32,0)"], "cannot expand 'width=range(16,32,0)': range() arg 3 must not be zero"),
    ("empty range", ["width=range(0)"], "'width=range(0)' gives no values, so the sweep has no jobs"),
    ("zero parallel jobs", ["hydra/launcher=parallel", "hydra.launcher.n_jobs=0"], "hydra.launcher.n_jobs=0 runs nothing"),
    ("more parallel jobs than a C int", ["hydra/launcher=parallel", "hydra.launcher.n_jobs=99999999999999999999"],
     "hydra.launcher.n_jobs=99999999999999999999 runs more workers than any machine has; valid: 1 .. 4096"),
    ("a job timeout of zero", ["hydra/launcher=processes", "hydra.launcher.timeout_min=0"],
     "hydra.launcher.timeout_min=0: a job would be stopped before it starts; valid: minutes > 0"),
    ("a joblib timeout of zero", ["hydra/launcher=parallel", "hydra.launcher.timeout=0"],
     "hydra.launcher.timeout=0.0: a job would be stopped before it starts; valid: seconds > 0, or null"),
    ("a joblib backend the launcher ignores", ["hydra/launcher=parallel", "hydra.launcher.backend=nope"],
     "unknown value 'nope' for hydra.launcher.backend; valid: loky, null (Hydra's joblib launcher always runs loky)"),
    ("a joblib backend hint", ["hydra/launcher=parallel", "hydra.launcher.prefer=proceses"],
     "unknown value 'proceses' for hydra.launcher.prefer (did you mean 'processes'?); valid: null, processes, threads"),
    ("a joblib batch of nothing", ["hydra/launcher=parallel", "hydra.launcher.batch_size=0"],
     "unknown value '0' for hydra.launcher.batch_size; valid: auto, or a whole number >= 1"),
    ("a key the local launcher lacks", ["hydra/launcher=processes", "hydra.launcher.backend=nope"],
     "unknown key 'hydra.launcher.backend' in 'hydra.launcher'"),
    ("no CPU for a job", ["hydra/launcher=processes", "hydra.launcher.cpus_per_task=0"],
     "hydra.launcher.cpus_per_task=0 is out of range; valid: 1 .. 4,096 CPUs per job"),
    ("two nodes of one machine", ["hydra/launcher=processes", "hydra.launcher.nodes=2"],
     "hydra.launcher.nodes=2 is out of range; valid: 1 node (hydra/launcher=processes runs on this machine)"),
    ("no SLURM node", ["hydra/launcher=slurm", "hydra.launcher.nodes=0"], "hydra.launcher.nodes=0 is out of range; valid: 1 .. "),
    ("a million CPUs for a SLURM job", ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1000000"],
     "hydra.launcher.cpus_per_task=1000000 is out of range; valid: 1 .. 4,096 CPUs per job"),
    ("negative SLURM memory", ["hydra/launcher=slurm", "hydra.launcher.mem_gb=-1"], "hydra.launcher.mem_gb=-1 is out of range; valid: 0 .. "),
    ("a SLURM array with no job at once", ["hydra/launcher=slurm", "hydra.launcher.array_parallelism=0"],
     "hydra.launcher.array_parallelism=0 is out of range; valid: 1 .. "),
    ("two tasks of one job", ["hydra/launcher=slurm", "hydra.launcher.tasks_per_node=2"],
     "hydra.launcher.tasks_per_node=2 is out of range; valid: 1 task per node (a job is one process: more would "
     "train it again beside itself)"),
    ("negative SLURM requeues", ["hydra/launcher=slurm", "hydra.launcher.max_num_timeout=-1"],
     "hydra.launcher.max_num_timeout=-1 is out of range; valid: 0 .. "),
    ("group YAML of the wrong shape", ["--config-dir", "{yaml_dir}", "model=listed"],
     "model: expected a mapping with name: one of cnn, cnn1d, custom, mlp, resnet"),
    ("group YAML without its schema", ["--config-dir", "{yaml_dir}", "model=untyped"],
     "model=mlp: its YAML file must start with 'defaults: [/schema/model/mlp@_here_, _self_]'"),
    # a second inner axis beside the LR (grid.<key>=[...])
    ("grid key that is no key", ["grid.optim.beta=[0.9]"],
     "unknown key 'grid.optim.beta' in 'grid.optim' (did you mean 'beta2'?); valid: beta1, beta2, eps, weight_decay"),
    ("grid key added past the schema", ["+grid.optim.momentum=[0.9]"],
     "unknown key 'grid.optim.momentum' (did you mean 'grid.optim.beta2'?); valid: grid.optim.beta1, grid.optim.beta2, "
     "grid.optim.eps, grid.optim.weight_decay, grid.param.act_mult, grid.param.attn_mult, grid.param.loss_mult, "
     "grid.param.output_mult, grid.param.residual_attn_ratio, grid.param.residual_mult, grid.hp.<role>.<name>"),
    ("grid key of another option", ["param=modular", "grid.param.output_mult=[1,2]"],
     "grid.param.output_mult: param=modular has no such key; keys that may vary per run here: optim.weight_decay, optim.beta1, optim.beta2, optim.eps"),
    ("grid of a scalar", ["grid.optim.weight_decay=0.1"], "grid.optim.weight_decay: Invalid value assigned: float is not a ListConfig"),
    ("empty grid list", ["grid.optim.weight_decay=[]"], "grid.optim.weight_decay=[] must be a non-empty list of numbers"),
    ("non-finite grid value", ["grid.optim.weight_decay=[0,inf]"], "grid.optim.weight_decay=[0.0, inf]: every value must be finite, got inf"),
    ("non-numeric grid value", ["grid.optim.weight_decay=[0,a]"], "grid.optim.weight_decay[1]: Value 'a' of type 'str' could not be converted to Float"),
    ("grid value the option refuses", ["param=mup", "grid.param.output_mult=[1,0]"],
     "grid.param.output_mult=[1.0, 0.0]: param.output_mult must be positive, got 0.0"),
    ("repeated grid value", ["grid.optim.weight_decay=[0.1,0.1]"], "grid.optim.weight_decay=[0.1, 0.1] repeats a value"),
    ("two grid keys", ["param=mup", "grid.param.output_mult=[1,2]", "grid.optim.weight_decay=[0,1]"],
     "grid takes one key (one more axis beside the LR), got grid.param.output_mult, grid.optim.weight_decay"),
    ("grid of too many runs", ["grid.optim.weight_decay=[0,1]", "n_seeds=1001"],
     "grid.optim.weight_decay has 2 values x 5 learning rates x n_seeds=1001 = 10010 runs in a job; at most 10000"),
    # model=custom (issue 17): the target, what it returns, what it computes
    ("custom model without a target", ["model=custom"],
     "model.target='' must be path/to/file.py:NAME or package.module:NAME"),
    ("custom target file missing", ["model=custom", "model.target={tmp}/nope.py:build"], "model.target={tmp}/nope.py:build: no file {tmp}/nope.py"),
    ("custom target does not import", ["model=custom", "model.target={broken}:build"],
     "model.target={broken}:build does not import: SyntaxError"),
    ("custom module does not import", ["model=custom", "model.target=no_such_pkg.nets:build"],
     "model.target=no_such_pkg.nets:build does not import: ModuleNotFoundError: No module named 'no_such_pkg'"),
    ("custom target names nothing", ["model=custom", "model.target={models}:biuld"],
     "model.target={models}:biuld: {models} defines no 'biuld'; callables there: "),
    ("custom target not callable", ["model=custom", "model.target={models}:WIDTH"],
     "model.target={models}:WIDTH: WIDTH is a int, not a class or function"),
    ("custom target returns no module", ["model=custom", "model.target={models}:not_a_module"],
     "model.target={models}:not_a_module returned a dict, not a torch nn.Module"),
    ("custom target raises when built", ["model=custom", "model.target={models}:raises"],
     "model.target={models}:raises raised when built (width=128 depth=3): ValueError: width must be even"),
    ("custom model that does not grow", ["model=custom", "model.target={models}:fixed"],
     "model.target={models}:fixed: no parameter grows with width"),
    ("custom logits of the wrong shape", ["model=custom", "model.target={models}:seven"],
     "model.target={models}:seven gives logits of shape (1, 7) for a batch of shape (1, 32); expected (1, 10)"),
    ("custom readout not inferred", ["model=custom", "model.target={models}:no_readout"],
     "model.target={models}:no_readout: no readout found (no weight maps the width to the 10 logits); name it with model.readout=NAME"),
    ("custom readout not found", ["model=custom", "model.target={models}:build", "model.readout=head"],
     "model.readout=head: model.target={models}:build has no such parameter; weights: 0.weight, 2.weight, 4.weight"),
    ("custom kwargs setting the width", ["model=custom", "model.target={models}:build", "model.kwargs={{width: 3}}"],
     "model.kwargs sets width, which lrtransfer passes itself"),
    ("custom kwargs not a mapping", ["model=custom", "model.target={models}:build", "model.kwargs=3"],
     "model.kwargs must be a mapping such as '{{dropout: 0.1}}', got 3"),
    ("depth-muP on a custom model without branches", ["model=custom", "model.target={models}:build", "param=mup", "param.depth_exponent=0.5"],
     "param=mup multiplies residual branches, and model.target={models}:build has none of the known families' branch "
     "outputs (c_proj, o_proj, down_proj): name each branch's last Linear with a glob, model.branch_outputs='*.proj'"),
    # CompleteP (issue 36)
    ("CompleteP alpha above 1", ["param=completep", "param.alpha=1.5"],
     "param.alpha=1.5 is outside [0, 1]: the branch multiplier L^-alpha must neither grow with depth (alpha < 0) "
     "nor shrink faster than 1/L"),
    ("CompleteP alpha below 0", ["param=completep", "param.alpha=-0.5"], "param.alpha=-0.5 is outside [0, 1]"),
    ("CompleteP base depth below 1", ["param=completep", "param.base_depth=0"], "param.base_depth must be positive, got 0"),
    ("CompleteP with SGD", ["param=completep", "optim=sgd"],
     "param=completep has rules for Adam-type optimizers only (their updates are adaptive), not for one whose updates are gradient"),
    ("CompleteP with another residual rule", ["model=resnet", "param=completep", "model.residual=sqrt_depth"],
     "model.residual=sqrt_depth: param=completep multiplies the residual branches by its own L^-alpha (param.alpha, "
     "param.base_depth) and corrects the LR and epsilon inside them for it; valid: model.residual=auto "
     "(or param=mup with model.residual=sqrt_depth)"),
    ("CompleteP on a custom model without branches", ["model=custom", "model.target={models}:build", "param=completep"],
     "param=completep multiplies residual branches, and model.target={models}:build has none of the known families' branch outputs"),
    ("branch outputs that match no layer", ["model=custom", "model.target={models}:build", "model.branch_outputs=*.c_proj"],
     "model.branch_outputs=*.c_proj: no Linear of model.target={models}:build matches it; its Linears: 0, 2, 4"),
    ("modular on a custom model", ["model=custom", "model.target={models}:build", "param=modular"],
     "param=modular needs the model's tree of modules (masses, sensitivities), which model=custom does not have; "
     "parameterizations that work: completep, equalized, mup, spectral, standard, umup"),
    # model=custom's own init (issue 35): the key, and a module whose own init cannot start runs per seed
    ("custom init not a choice", ["model=custom", "model.target={models}:build", "model.init=random"],
     "model.init: Invalid value 'random', expected one of [own, torch]"),
    ("custom own init that ignores the seed", ["model=custom", "model.target={models}:self_seeded"],
     "model.target={models}:self_seeded: its own init gives 0.weight the same random values under seeds 0 and 1 "
     "(it seeds itself, or loads its tensors)"),
    ("custom own init that does not repeat", ["model=custom", "model.target={models}:unseeded"],
     "model.target={models}:unseeded: its own init is not the same twice under one seed (0.weight differs)"),
    ("negative muP hidden std", ["param=mup", "param.hidden_std=-1"],
     "param.hidden_std must be >= 0 (0: the model's own init), got -1.0"),
    ("zero muP attention multiplier", ["param=mup", "param.attn_mult=0"], "param.attn_mult must be positive, got 0.0"),
    ("unknown tied-table convention", ["param=mup", "param.tied_init=shared"],
     "param.tied_init: Invalid value 'shared', expected one of [embedding, readout]"),
    # u-muP (issue 55): its multipliers, and what it cannot do right
    ("u-muP multiplier 0", ["param=umup", "param.act_mult=0"], "param.act_mult must be positive, got 0.0"),
    ("u-muP multiplier negative", ["param=umup", "param.loss_mult=-1"], "param.loss_mult must be positive, got -1.0"),
    ("u-muP multiplier not a number", ["param=umup", "param.attn_mult=abc"],
     "param.attn_mult: Value 'abc' of type 'str' could not be converted to Float"),
    ("u-muP multiplier infinite", ["param=umup", "param.residual_mult=inf"], "param.residual_mult must be finite, got inf"),
    ("u-muP with SGD", ["param=umup", "optim=sgd"], "param=umup has rules for Adam-type optimizers only (optim=adam), not optim=sgd"),
    ("u-muP on a conv net", ["param=umup", "model=cnn"],
     "param=umup has unit-scaled forms for model=mlp, resnet, transformer, custom, not model=cnn"),
    ("u-muP with tanh", ["param=umup", "model.activation=tanh"],
     "model.activation=tanh: param=umup has unit-scaled forms of relu, gelu only"),
    ("u-muP act_mult on relu", ["param=umup", "param.act_mult=2"],
     "param.act_mult=2 does nothing here (relu(mult x) / mult is relu(x)): leave it at 1"),
    ("u-muP residual multiplier on an MLP", ["param=umup", "grid.param.residual_mult=[0.5,2]"],
     "param.residual_mult=1 with grid.param.residual_mult=[0.5, 2.0] does nothing here (model=mlp has no residual adds"),
    ("u-muP attention ratio on ResNet-S", ["param=umup", "model=resnet", "param.residual_attn_ratio=2"],
     "param.residual_attn_ratio=2 does nothing here (model=resnet has no attention branches): leave it at 1"),
    ("u-muP with another residual rule", ["param=umup", "model=resnet", "model.residual=one"],
     "model.residual=one: param=umup mixes each residual add by its own taus"),
    ("u-muP on a custom model's nonlinearities", ["model=custom", "model.target={models}:build", "param=umup",
                                                  "param.act_mult=2"],
     "param.act_mult=2 does nothing here (it cannot reach a published model's own nonlinearities): leave it at 1"),
    ("u-muP on a table tied to the readout", ["model=custom", f"model.target={NANOGPT}:GPT", f"model.config={NANOGPT}:GPTConfig",
                                              "model.width_key=n_embd", "model.config_kwargs={{n_head: 2}}", "data=text",
                                              "param=umup"],
     "param=umup: transformer.wte.weight is tied to the readout lm_head.weight, and u-muP has no rule for one tensor"),
    ("u-muP on a matrix outside any layer", ["model=custom", f"model.target={LOOSE}:LooseNet", "param=umup"],
     "param=umup has no rule for a matrix outside a Linear, conv or embedding (mix)"),
    ("unknown hyperparameter role", ["hp.attn.lr_mult=2"], "unknown key 'hp.attn' in 'hp' (did you mean 'attention'?)"),
    ("unknown hyperparameter", ["hp.hidden.lr_mul=2"], "unknown key 'hp.hidden.lr_mul' in 'hp.hidden' (did you mean 'lr_mult'?)"),
    ("a role the model has not", ["hp.attention.lr_mult=2"], "hp.attention.lr_mult: model=mlp has no role attention"),
    ("a hyperparameter the optimizer has not", ["optim=sgd", "hp.hidden.eps_mult=2"], "hp.hidden.eps_mult: optim=sgd has no eps"),
    ("a per-run beta2 under SGD", ["optim=sgd", "grid.hp.hidden.beta2=[0.9,0.99]"],
     "grid.hp.hidden.beta2: optim=sgd has no beta2 (it is not Adam-like); valid names here: lr_mult, init_mult, wd_mult"),
    ("a beta of Muon's hidden matrices", ["optim=muon", "hp.hidden.beta1=0.8"],
     "hp.hidden.beta1: optim=muon orthogonalises the hidden matrices (momentum, no Adam beta1)"),
    ("a per-run beta the SDE rule breaks", ["param.sde_rule=sde", "train.steps=100", "grid.hp.readout.beta2=[0.9,0.3]"],
     "kappa = 3 (base: 300 steps of batch 64) pushes beta2=0.3 to -1.1"),
    ("a negative LR multiplier", ["hp.readout.lr_mult=-1"], "hp.readout.lr_mult=-1.0 must be >= 0"),
    ("an empty search range", ["search.hp.hidden.lr_mult=[4,0.25]"], "search.hp.hidden.lr_mult=[4.0, 0.25] is an empty range"),
    ("a log range from 0", ["search.lr=[0,0.01]"], "search.lr=[0.0, 0.01]: learning rates are searched log-uniformly"),
    pytest.param("CUDA asked for, none present", ["engine.device=cuda"], "CUDA is not available",
                 marks=pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA"), id="no CUDA"),
]

# Keys added since the last probe (issue 40): adaptive sweeps, --budget, lr.resolution, a published
# model's config class and fields, its output, the second inner axis.
CONFIGURED = ["model=custom", "model.target={models}:Configured", "model.config={models}:Cfg"]
NEW_KEYS = [
    ("coarse step 0", ["adaptive.coarse_step=0"], "adaptive.coarse_step must be positive, got 0.0"),
    ("NaN coarse step", ["adaptive.coarse_step=nan"], "adaptive.coarse_step must be positive, got nan"),
    ("coarse step of 1e9 octaves", ["adaptive.coarse_step=1e9"], "adaptive.coarse_step=1e+09 is beyond the sane bound of 200 octaves"),
    ("no seeds", ["adaptive.max_seeds=0"], "adaptive.max_seeds must be positive, got 0"),
    ("a billion seeds", ["adaptive.max_seeds=1000000000"], "adaptive.max_seeds=1e+09 is beyond the sane bound of 100,000 seeds"),
    ("fractional seeds", ["adaptive.max_seeds=2.5"], "adaptive.max_seeds: Value '2.5' of type 'float' could not be converted to Integer"),
    ("negative extension", ["adaptive.extend=-1"], "adaptive.extend must be a number of octaves >= 0, got -1.0"),
    ("extension of 1e9 octaves", ["adaptive.extend=1e9"], "adaptive.extend=1e+09 is beyond the sane bound of 200 octaves"),
    ("budget key 0", ["adaptive.budget=0"], "adaptive.budget must be positive, got 0"),
    ("budget key 1e99", ["adaptive.budget=1e99"], "adaptive.budget: Value '1e+99' of type 'float' could not be converted to Integer"),
    ("time budget key 0", ["adaptive.budget_s=0"], "adaptive.budget_s must be positive, got 0.0"),
    ("infinite time budget key", ["adaptive.budget_s=inf"], "adaptive.budget_s=inf is beyond the sane bound of 31,622,400 seconds"),
    ("unknown adaptive metric", ["adaptive.metric=loss"], "adaptive.metric: Invalid value 'loss', expected one of [train_loss, eval_loss, eval_acc]"),
    ("--budget inf", ["--until-decided", "--budget", "inf"], "--budget 'inf' is beyond the sane bound of 1,000,000,000,000 run-steps"),
    ("--budget 1e99", ["--until-decided", "--budget", "1e99"], "--budget '1e99' is beyond the sane bound of 1,000,000,000,000 run-steps"),
    ("--budget 1e99h", ["--until-decided", "--budget", "1e99h"], "--budget '1e99h' is beyond the sane bound of 366 days"),
    ("--budget infh", ["--until-decided", "--budget", "infh"], "--budget 'infh' is beyond the sane bound of 366 days"),
    ("--budget of half a run-step", ["--until-decided", "--budget", "0.5"], "--budget '0.5': give a whole number of run-steps"),
    ("--budget in an unknown unit", ["--until-decided", "--budget", "10x"], "--budget '10x': give run-steps (20000) or a time"),
    ("negative resolution", ["lr.resolution=-1"], "lr.resolution must be a positive number of octaves, got -1.0"),
    ("NaN resolution", ["lr.resolution=nan"], "lr.resolution must be a positive number of octaves, got nan"),
    ("config without a name", [*CONFIGURED[:2], "model.config={models}"],
     "model.config='{models}' must be path/to/file.py:NAME or package.module:NAME"),
    ("config that returns None", [*CONFIGURED[:2], "model.config={models}:no_config", "model.width_key=n_embd"],
     "model.config={models}:no_config returned None, not a config object"),
    ("config that names nothing", [*CONFIGURED[:2], "model.config={models}:Cgf", "model.width_key=n_embd"],
     "model.config={models}:Cgf: {models} defines no 'Cgf'; callables there: Cfg, Configured"),
    ("config kwargs not a mapping", [*CONFIGURED, "model.width_key=n_embd", "model.config_kwargs=3"],
     "model.config_kwargs must be a mapping such as '{{n_head: 4}}', got 3"),
    ("config kwargs setting the width field", [*CONFIGURED, "model.width_key=n_embd", "model.config_kwargs={{n_embd: 4}}"],
     "model.config_kwargs sets n_embd, which model.width_key fills with the width; drop it from model.config_kwargs"),
    ("config kwargs setting the depth field", [*CONFIGURED, "model.width_key=n_embd", "model.depth_key=n_layer",
                                               "model.config_kwargs={{n_layer: 4}}"],
     "model.config_kwargs sets n_layer, which model.depth_key fills with the depth; drop it from model.config_kwargs"),
    ("kwargs setting the width field", ["model=custom", "model.target={models}:build", "model.width_key=width", "model.kwargs={{width: 4}}"],
     "model.kwargs sets width, which model.width_key fills with the width; drop it from model.kwargs"),
    ("width field a number", [*CONFIGURED, "model.width_key=3"], "model.width_key must be a field name (n_embd) or a mapping"),
    ("width fields an empty mapping", [*CONFIGURED, "model.width_key={{}}"], "model.width_key={{}} names no field"),
    ("a list of widths for one number", [*CONFIGURED, "model.width_key={{n_embd: [1, 2]}}"],
     "model.width_key: n_embd gets a list of widths [128, 256], but model.config={models}:Cfg takes one number as n_embd"),
    ("one width for a channel list", ["model=custom", "model.target={models}:channels", "model.width_key=sizes"],
     "model.width_key: sizes gets one width (128), but model.target={models}:channels takes a list as sizes"),
    ("width multiple 0", [*CONFIGURED, "model.width_key={{n_embd: 0}}"], "model.width_key: n_embd=0 x width 128 is not a positive whole number"),
    ("depth field the width field", [*CONFIGURED, "model.width_key=n_embd", "model.depth_key=n_embd"],
     "model.depth_key=n_embd is also a field of model.width_key: the width and the depth cannot both go into it"),
    ("depth field not a name", [*CONFIGURED, "model.width_key=n_embd", "model.depth_key=1layer"],
     "'1layer' is not a field name"),
    ("output that is no tensor", ["model=custom", "model.target={models}:Pair", "model.output=1"],
     "model.output=1: model.target={models}:Pair returns a tuple of 2 (Tensor, NoneType), whose 1 is a NoneType, not a tensor of logits"),
    ("output index past the end", ["model=custom", "model.target={models}:Pair", "model.output=5"],
     "model.output=5: model.target={models}:Pair returns a tuple of 2 (Tensor, NoneType), which has no 5"),
    ("negative grid value", ["grid.optim.weight_decay=[0,-1]"], "grid.optim.weight_decay=[0.0, -1.0]: optim.weight_decay must be >= 0"),
    ("infinite output multiplier in a grid", ["param=mup", "grid.param.output_mult=[1,inf]"],
     "grid.param.output_mult=[1.0, inf]: every value must be finite, got inf"),
    ("a grid in an adaptive sweep", ["width=16,32", "grid.optim.weight_decay=[0,0.1]", "--until-decided"],
     "grid.optim.weight_decay: an adaptive sweep refines the LR alone"),
    ("grid key of no group", ["+grid.foo=[1]"], "unknown key 'grid.foo'; valid: grid.optim.beta1, grid.optim.beta2, "
     "grid.optim.eps, grid.optim.weight_decay, grid.param.act_mult, grid.param.attn_mult, grid.param.loss_mult, "
     "grid.param.output_mult, grid.param.residual_attn_ratio, grid.param.residual_mult, grid.hp.<role>.<name>"),
    ("nested grid list", ["grid.optim.weight_decay=[[1]]"], "grid.optim.weight_decay=[[1]]: every value must be a number, got [1]"),
]


@pytest.fixture
def yaml_dir(tmp_path):
    d = tmp_path / "userconf"
    (d / "model").mkdir(parents=True)
    (d / "model" / "broken.yaml").write_text("name: mlp\nactivation: [relu\n")
    (d / "model" / "listed.yaml").write_text("- name: mlp\n- bias: true\n")
    (d / "model" / "untyped.yaml").write_text("name: mlp\nactivation: relu\nbias: true\n")
    (d / "model" / "latin.yaml").write_bytes("name: mlp\nactivation: relu # café\n".encode("latin-1"))
    return d


USER_MODELS = """
import random
from dataclasses import dataclass

import torch

from torch import nn

WIDTH = 3

def build(width, depth, input_shape, output_dim):
    return nn.Sequential(nn.Linear(input_shape[0], width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, output_dim))

def self_seeded(width, input_shape, output_dim):
    net, gen = build(width, 3, input_shape, output_dim), torch.Generator().manual_seed(7)
    for p in net.parameters():
        nn.init.normal_(p, std=0.02, generator=gen)
    return net

def unseeded(width, input_shape, output_dim):
    net = build(width, 3, input_shape, output_dim)
    with torch.no_grad():
        net[0].weight.mul_(1 + random.random())
    return net

def not_a_module(width):
    return {"width": width}

def raises(width):
    raise ValueError("width must be even")

def fixed(input_shape, output_dim):
    return nn.Linear(input_shape[0], output_dim)

def seven(width, input_shape):
    return nn.Sequential(nn.Linear(input_shape[0], width), nn.ReLU(), nn.Linear(width, 7))

class First(nn.Module):
    def forward(self, x):
        return x[..., :10]

def no_readout(width, input_shape):
    return nn.Sequential(nn.Linear(input_shape[0], width), nn.ReLU(), nn.Linear(width, width), First())


@dataclass
class Cfg:
    n_embd: int
    n_layer: int = 2


def no_config(**kwargs):
    return None


class Configured(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.a, self.b = nn.Linear(32, config.n_embd), nn.Linear(config.n_embd, 10)

    def forward(self, x):
        return self.b(self.a(x))


class Pair(nn.Module):
    def __init__(self, width, input_shape, output_dim):
        super().__init__()
        self.a, self.b = nn.Linear(input_shape[0], width), nn.Linear(width, output_dim)

    def forward(self, x):
        return self.b(self.a(x)), None


def channels(input_shape, output_dim, sizes=(8, 16)):
    return nn.Sequential(nn.Linear(input_shape[0], sizes[0]), nn.ReLU(), nn.Linear(sizes[0], output_dim))
"""


@pytest.fixture
def user_models(tmp_path):
    """(a file of user models, one that does not parse)."""
    (tmp_path / "usernets.py").write_text(USER_MODELS)
    (tmp_path / "broken.py").write_text("def build(width:\n")
    return tmp_path / "usernets.py", tmp_path / "broken.py"


# What the hostile probe of issue 58 still found
PROBE_58 = [
    ("CompleteP on the MLP", ["param=completep", "depth=8"],
     "param=completep multiplies residual branches by its depth rule, and model=mlp has none (its layers are one chain)"
     ": a depth study under it would measure the rule without its depth part; models with residual branches: resnet, "
     "resnet_cnn, transformer, and custom where they are found or named (model.branch_outputs)"),
    ("depth-muP on the MLP", ["param=mup", "param.depth_exponent=0.5"],
     "param=mup multiplies residual branches by its depth rule, and model=mlp has none"),
    ("CompleteP base depth past depth's bound", ["model=resnet", "param=completep", "param.base_depth=1000000"],
     "param.base_depth=1e+06 is beyond the sane bound of 1,024 layers or blocks (depth's own bound)"),
    ("muP hidden std of 1e300", ["param=mup", "param.hidden_std=1e300"],
     "param.hidden_std=1e+300 is beyond the sane bound of 1.0 (the std of a hidden weight's entries at the base width"),
    ("a boolean key given 2", ["param=mup", "param.eps_by_width=2"], "param.eps_by_width=2 is not a boolean; valid: true, false"),
    ("a boolean key given yes", ["model.bias=yes"], "model.bias=yes is not a boolean; valid: true, false"),
    ("a boolean section key given 1", ["engine.progress=1"], "engine.progress=1 is not a boolean; valid: true, false"),
    ("attention multiplier on a model without attention", ["param=mup", "param.attn_mult=1"],
     "param.attn_mult=1.0 does nothing here: it acts on attention logits, and model=mlp computes no attention; leave it "
     "out (models with attention: custom, transformer)"),
    ("LR x decay past 1 at the grid's top", ["optim.weight_decay=1e10", "optim.decay_scaling=lr"],
     "optim.weight_decay=1e+10 with optim.decay_scaling=lr takes LR x decay = 2^-6 x 1e+10 = 1.56e+08 of each weight a "
     "step at the grid's top LR (lr.log2_max=-6): 1 or more wipes out every weight at the first step; give a weight "
     "decay below 64 (1 / the top LR), or a lower lr.log2_max"),
    ("LR x decay past 1 in a grid", ["optim.decay_scaling=lr", "grid.optim.weight_decay=[0,1,100]"],
     "optim.weight_decay=100 with optim.decay_scaling=lr takes LR x decay = 2^-6 x 100 = 1.56 of each weight"),
    ("a decay of 1 a step", ["optim.weight_decay=1"],
     "optim.weight_decay=1 with optim.decay_scaling=independent takes 1 of each weight a step: 1 or more wipes out "
     "every weight at the first step"),
    ("branch outputs outside the branches", ["model=custom", "model.target={models}:build", "param=completep",
                                             "model.branch_outputs=*"],
     "model.branch_outputs=* matches 0, outside the residual branches (in no block of the model); it matched 0, 2, 4: "
     "match each branch's last Linear only (e.g. '*.c_proj')"),
]

CASES = [c if hasattr(c, "marks") else pytest.param(*c, id=c[0]) for c in CATALOGUE + NEW_KEYS + PROBE_58]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A data root holding MNIST (100 training images) and a CIFAR-10 whose first batch is corrupt."""
    from tests.datafiles import write_cifar, write_mnist

    root = tmp_path_factory.mktemp("datasets")
    write_cifar(root)
    (root / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"truncated")
    write_mnist(root)
    return root


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A results folder holding a finished study, which no bad command may touch."""
    from lrtransfer.sweeps.launch import launch

    root = tmp_path_factory.mktemp("results")
    launch([*TINY, "width=16", f"results_dir={root}", "name=keep"])
    assert list(root.rglob("record.json"))
    return root


@pytest.mark.parametrize("case, args, fragment", CASES)
def test_bad_sweep_input(cli, finished, tmp_path, yaml_dir, datasets, user_models, case, args, fragment):
    before = {p: p.read_bytes() for p in finished.rglob("record.json")}
    subs = {"tmp": str(tmp_path), "yaml_dir": str(yaml_dir), "cifar": str(datasets), "models": str(user_models[0]),
            "broken": str(user_models[1])}
    code, out, err = cli("sweep", *TINY, *[a.format(**subs) for a in args], f"results_dir={finished}", "name=bad")
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and fragment.format(**subs) in lines[0], lines[0]
    assert "Traceback" not in err
    assert {p: p.read_bytes() for p in finished.rglob("record.json")} == before


def boolean_keys() -> list[tuple[list[str], str]]:
    """Every boolean key of every option and section: (the overrides choosing its option, the key)."""
    from dataclasses import fields

    from lrtransfer import options
    from lrtransfer.config.validate import SECTIONS

    out = [([f"{g}={name}"], f"{g}.{f.name}") for g in options.GROUPS for name, schema in options.of(g).items()
           for f in fields(schema) if f.type in (bool, "bool")]
    return out + [([], f"{section}.{f.name}") for section, schema in SECTIONS.items() for f in fields(schema)
                  if f.type in (bool, "bool")]


@pytest.mark.parametrize("choose, key", boolean_keys(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_boolean_key_takes_only_a_boolean(choose, key):
    """OmegaConf reads 2, 1, 'yes', 'on' as true: `param.eps_by_width=2` trained with the rule on, without a word."""
    from lrtransfer.config import ConfigError, validate
    from tests.conftest import compose

    for value in ("2", "yes"):
        over = [*choose, f"{key}={value}"]
        with pytest.raises(ConfigError, match=re.escape(f"{key}={value} is not a boolean; valid: true, false")):
            validate(compose(*over), over)
    for value in ("false", "true"):  # taken (or refused for another reason: model=cnn on the default vectors)
        try:
            validate(compose(*choose, f"{key}={value}"), [*choose, f"{key}={value}"])
        except ConfigError as e:
            assert "is not a boolean" not in str(e)


def test_an_empty_results_dir_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where an empty results_dir would have written the study
    code, _, err = cli("sweep", *TINY, "results_dir=")
    assert code == 2 and err.strip() == "error: results_dir is empty: set results_dir=PATH (the default: results)", err
    assert not list(tmp_path.rglob("record.json"))


def test_unwritable_results_dir(cli, tmp_path):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        target = blocker / "sub"  # a path under a regular file cannot be created, even by root
    else:
        target = tmp_path / "ro"
        target.mkdir(mode=0o500)
    code, _, err = cli("sweep", *TINY, f"results_dir={target}")
    assert code == 2 and "not writable" in err and str(target) in err and len(err.strip().splitlines()) == 1


# `lrtransfer predict` on the finished study (one width: its verdict is undetermined)
PREDICT = [
    ("non-positive width", ["--width", "0"], "--width must be a positive number, got 0"),
    ("non-positive scale", ["--at", "-4"], "--at must be a positive number, got -4"),
    ("no scale", [], "give one scale to predict at: --width N, --depth N, or --at N"),
    ("an axis the study lacks", ["--depth", "8"], "has the axis depth; its axes: width"),
    ("an undetermined verdict", ["--width", "4096"], "its verdict is undetermined (width 16: "),
    ("a vanishing scale", ["--width", "1e-300"], "--width 1e-300 is beyond the sane range of a scale"),
    ("a scale past float range of LRs", ["--width", "1e308"], "--width 1e+308 is beyond the sane range of a scale"),
]


@pytest.mark.parametrize("command, args", [("report", ["--out", "{blocked}/r.html"]), ("plot", ["--out", "{blocked}/f"]),
                                           ("export", ["--out", "{blocked}/runs.csv"]), ("report", ["--out", "{folder}"])])
def test_an_out_path_that_cannot_be_written_is_one_line(cli, finished, tmp_path, command, args):
    """--out under a regular file (uncreatable, even by root), or a report onto a folder: one line,
    exit 2, before any record is read."""
    (tmp_path / "file").write_text("not a folder")
    subs = {"blocked": str(tmp_path / "file"), "folder": str(tmp_path)}
    code, out, err = cli(command, str(finished), *[a.format(**subs) for a in args])
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert code == 2 and len(lines) == 1 and "cannot write there" in lines[0], (out, err)


@pytest.mark.parametrize("command, args", [("plot", ["{finished}"]), ("report", ["{finished}"]), ("export", ["{finished}"]),
                                           ("coord-check", ["width=16,32", "--steps", "1"])])
@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_out_is_one_line(cli, finished, tmp_path, monkeypatch, command, args, empty):
    """--out '' was this folder: plot and coord-check wrote their figures into it without a word,
    export and report said '--out .: cannot write there (Is a directory)'; --out ' ' a folder named
    by a space."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(command, *[a.format(finished=finished) for a in args], "--out", empty)
    assert code == 2 and err.strip() == f"error: --out {empty!r} is empty: give a path (--out PATH), or leave --out " \
                                        "out for the command's default (--help says it)", (out, err)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["export", "report"])
@pytest.mark.parametrize("target", ["record.json", "multirun.yaml", "beside"])
def test_an_out_path_onto_what_a_sweep_wrote_is_refused(cli, finished, command, target):
    """A job's record, the sweep's multirun.yaml or any file in a job's folder is never overwritten."""
    job = next(finished.rglob("record.json")).parent
    path = {"record.json": job / "record.json", "multirun.yaml": next(finished.rglob("multirun.yaml")),
            "beside": job / "job.log"}[target]
    before = path.read_bytes()
    code, out, err = cli(command, str(finished), "--out", str(path))
    assert code == 2 and "a file a sweep wrote" in err and path.read_bytes() == before, (out, err)


@pytest.mark.parametrize("case, args, fragment", [pytest.param(*c, id=c[0]) for c in PREDICT])
def test_bad_predict_input(cli, finished, case, args, fragment):
    before = {p: p.read_bytes() for p in finished.rglob("record.json")}
    code, out, err = cli("predict", str(finished), *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert {p: p.read_bytes() for p in finished.rglob("record.json")} == before


@pytest.mark.parametrize("command", ["summary", "plot", "predict"])
def test_reading_a_folder_without_records(cli, tmp_path, command):
    scale = ["--width", "64"] if command == "predict" else []
    code, _, err = cli(command, str(tmp_path), *scale)
    assert code == 2 and "no finished records" in err
    code, _, err = cli(command, str(tmp_path / "missing"), *scale)
    assert code == 2 and "does not exist" in err


def test_a_corrupt_record_is_skipped_with_a_warning_naming_it(cli, two_widths, tmp_path):
    tmp_path = tmp_path / "r"
    _copy(two_widths, tmp_path)  # the records of `sweep TINY width=16,32 name=s`
    bad = next((tmp_path / "s").glob("*/record.json"))
    bad.write_text('{"status": "compl')
    code, out, err = cli("summary", str(tmp_path), "--json")
    assert code == 0 and str(bad) in err and "skipped" in err
    # and a sweep recomputes the job whose record is unreadable, leaving the other alone
    code, out, _ = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=s")
    assert code == 0 and "1 job(s) ran, 1 already done" in out
    stray = tmp_path / "s" / "stray" / "record.json"  # a corrupt record of no job of this sweep
    stray.parent.mkdir()
    stray.write_text('{"status": "compl')
    code, out, err = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=s")
    # the sweep's own summary skips it with one warning line, not a raw Python warning
    assert code == 0 and f"warning: skipped {stray}" in err and "SkippedRecordWarning" not in err


@pytest.mark.parametrize("command", ["list", "summary", "plot", "report"])
def test_a_record_whose_width_is_not_a_number(cli, two_widths, tmp_path, command):
    import json

    tmp_path = tmp_path / "r"
    paths = _copy(two_widths, tmp_path)
    for i, path in enumerate(paths):
        rec = json.loads(path.read_text())
        rec["config"]["width"] = "wide"
        path.write_text(json.dumps(rec))
        code, out, err = cli(command, str(tmp_path))
        assert "Traceback" not in err and f"skipped {path}: malformed record" in err
        if i == len(paths) - 1:  # every record lacks a numeric width: nothing to analyse
            assert code == 2 and "no finished records" in err


# A mistyped command line, which Typer would report as a usage block and a framed panel
USAGE = [
    ("unknown command", ["sumary", "{dir}"],
     "error: unknown command 'sumary'; did you mean summary? valid: sweep, summary, plot, report, predict, export, "
     "list, coord-check, inspect, import, tune (lrtransfer -h)"),
    ("unknown option", ["plot", "{dir}", "--metrc", "eval_loss"],
     "error: unknown option --metrc for lrtransfer plot; did you mean --metric? valid: --all-versions, --curves-lr, "
     "--metric, --out, -h/--help (lrtransfer plot -h)"),
    ("unknown option, nothing close", ["summary", "{dir}", "--axis", "width"],
     "error: unknown option --axis for lrtransfer summary; valid: --all-versions, --json, --metric, -h/--help "
     "(lrtransfer summary -h)"),
    ("unknown option beside overrides", ["inspect", "width=8", "--out", "x"],
     "error: unknown option --out for lrtransfer inspect; valid: --json, --log2-lr, -h/--help (lrtransfer inspect -h)"),
    ("mistyped option beside overrides", ["coord-check", "width=8,16", "--step=2"],
     "error: unknown option --step for lrtransfer coord-check; did you mean --steps? valid: --log2-lr, --out, --seeds, "
     "--steps, -h/--help (lrtransfer coord-check -h)"),
    ("not a number", ["predict", "{dir}", "--width", "wide"],
     "error: --width 'wide': Input should be a valid number"),
    ("not an integer", ["coord-check", "--steps", "2.5"], "error: --steps '2.5': "),
    ("an option without its value", ["predict", "{dir}", "--width"], "error: Option '--width' requires an argument"),
    ("two folders", ["summary", "{dir}", "{dir}"], "error: Got unexpected extra argument"),
]


@pytest.mark.parametrize("case, args, fragment", USAGE, ids=[c[0] for c in USAGE])
def test_a_mistyped_command_line_is_one_line(cli, tmp_path, case, args, fragment):
    code, out, err = cli(*[a.format(dir=tmp_path) for a in args])
    assert code == 2 and err.count("\n") == 1 and err.startswith(fragment), (out, err)


def test_no_command_prints_the_help(cli):
    code, out, err = cli()
    assert code == 2 and "Commands" in out + err and "error" not in out + err


def test_unknown_metric(cli, tmp_path):
    code, _, err = cli("summary", str(tmp_path), "--metric", "loss")
    assert code == 2 and "unknown metric 'loss'; valid: train_loss, eval_loss, eval_acc" in err


# ---------------------------------------------------------------- records that cannot quietly change a verdict (issue 40)
@pytest.mark.parametrize("damage, why", [
    (lambda rec: rec["runs"][2].update(final_loss="x"), "run 2: final_loss='x' is not a finite number"),
    (lambda rec: rec["runs"][1].update(log2_lr=float("nan"), final_loss=float("inf")), "run 1: log2_lr=nan is not a finite number"),
    (lambda rec: rec.update(runs=[]), "complete record with no runs"),
], ids=["loss x", "NaN LR", "no runs"])
def test_a_bad_value_inside_a_record_is_said_and_no_verdict_reads_as_whole(cli, two_widths, tmp_path, damage, why):
    import json

    path = _copy(two_widths, tmp_path / "r")[0]
    rec = json.loads(path.read_text())
    damage(rec)
    runs = len(rec["runs"])  # the runs it holds are all left out
    path.write_text(json.dumps(rec))
    code, out, err = cli("summary", str(tmp_path / "r"))
    assert code == 0 and "Traceback" not in err
    assert f"-> undetermined (incomplete: 1 record(s) of {runs} runs skipped)" in out, out
    assert f"1 record(s) skipped ({runs} runs)" in out and why in out, out
    if why.startswith("run 2"):  # the report says the same (once is enough: it draws figures)
        code, out, err = cli("report", str(tmp_path / "r"))
        text = (tmp_path / "r" / "report.html").read_text()
        assert code == 0 and f"1 record(s) skipped ({runs} runs)" in text
        assert f"(incomplete: 1 record(s) of {runs} runs skipped)" in text


@pytest.mark.parametrize("command", ["summary", "plot", "report", "predict"])
def test_a_record_nested_100000_deep_is_one_warning(cli, two_widths, tmp_path, command):
    deep = tmp_path / "r" / "s" / "deep" / "record.json"
    _copy(two_widths, tmp_path / "r")
    deep.parent.mkdir()
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = cli(command, str(tmp_path / "r"), *(["--width", "64"] if command == "predict" else []))
    assert "Traceback" not in err and "RecursionError" not in err
    assert f"warning: skipped {deep}: unreadable record (nested deeper than 32 levels)" in err
    assert code == (2 if command == "predict" else 0), err  # predict: the two widths' optima are on the grid's edge


def test_a_copied_study_folder_is_read_once(cli, two_widths, tmp_path):
    """`cp -r results/s results/sc`: its records name study s, and each job is counted once, the copies set aside."""
    import json
    import shutil

    _copy(two_widths, tmp_path / "r")
    shutil.copytree(tmp_path / "r" / "s", tmp_path / "r" / "sc")
    code, out, err = cli("list", str(tmp_path / "r"))
    assert code == 0 and re.search(r"│ s\s+│.*│\s+2 │\s+10 │", out), out
    assert err.count("warning: set aside") == 2 and "another copy of job" in err
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    doc = json.loads(out)
    assert [g["n_runs"] for g in doc["groups"]] == [[5, 5]] and len(doc["set_aside"]) == 2
    code, out, _ = cli("export", str(tmp_path / "r"))
    assert code == 0 and "(10 runs," in out


@pytest.mark.parametrize("command", ["list", "summary", "plot", "report", "predict"])
def test_runs_two_jobs_hold_are_one_warning_line_in_every_command(cli, two_widths, tmp_path, command):
    """`list` and `report` printed it as a raw Python warning (`grouping.py:92: SkippedRecordWarning: ...`
    and the source line), `summary` and `plot` as the `warning:` line every command now prints."""
    import json

    path = _copy(two_widths, tmp_path / "r")[0]
    rec = json.loads(path.read_text())
    rec["job_id"], rec["config"]["n_seeds"] = "again", 1  # the same runs, in a job of another id
    (path.parent.parent / "again").mkdir()
    (path.parent.parent / "again" / "record.json").write_text(json.dumps(rec))
    code, out, err = cli(command, str(tmp_path / "r"), *(["--width", "64"] if command == "predict" else []))
    line = f"warning: study s: {len(rec['runs'])} run(s) are held by two jobs (the same seed and LR"
    assert err.count(line) == 1 and "SkippedRecordWarning" not in err and "grouping.py" not in err, err


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("value", ["0.5", "nan", "inf"])
def test_a_curves_lr_off_the_grid_is_one_line(cli, finished, tmp_path, command, value):
    """Its figure would have no curve: the LRs measured are named instead."""
    out = tmp_path / ("fig" if command == "plot" else "r.html")
    code, _, err = cli(command, str(finished), "--curves-lr", value, "--out", str(out))
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert code == 2 and len(lines) == 1 and f"--curves-lr {float(value):g} is no log2 LR of" in lines[0], err
    assert "; its LRs: " in lines[0] and not (out.exists() and any(out.iterdir()) if out.is_dir() else out.exists())


def test_a_curves_lr_on_the_grid_draws_its_curves(cli, finished, tmp_path):
    lr = json.loads(next(finished.rglob("record.json")).read_text())["runs"][0]["log2_lr"]
    code, out, err = cli("plot", str(finished), "--curves-lr", str(lr), "--out", str(tmp_path / "fig"))
    assert code == 0 and list((tmp_path / "fig").glob("*curves.png")), err


def test_inspect_of_a_model_too_large_to_allocate_is_one_line(cli):
    code, out, err = cli("inspect", "width=100000000")
    assert code == 2 and err.startswith("error: too large for this machine (") and "choose smaller sizes" in err, err
    assert len(err.strip().splitlines()) == 1


# `lrtransfer import TABLE --name STUDY ...` (tests/test_import.py): every case before anything is written
COLUMNS = ["--scale", "width", "--lr", "lr", "--loss", "loss"]
IMPORT = [
    ("a table that is not there", ["{tmp}/nope.csv", "--name", "s", *COLUMNS], "{tmp}/nope.csv: no such file"),
    ("a folder as the table", ["{tmp}", "--name", "s", *COLUMNS, "--format", "csv"], "{tmp}: a folder, not a table of runs"),
    ("a table of no known format", ["{tmp}/runs.txt", "--name", "s", *COLUMNS],
     "{tmp}/runs.txt: cannot tell its format from the extension '.txt'; give --format (csv, tsv, json, parquet)"),
    ("an unknown --format", ["{tmp}/runs.csv", "--name", "s", *COLUMNS, "--format", "xlsx"],
     "--format 'xlsx' is no table format; valid: csv, json, parquet, tsv"),
    ("a line that is not JSON", ["{tmp}/broken.jsonl", "--name", "s", *COLUMNS],
     "{tmp}/broken.jsonl: line 2 is not JSON (JSONDecodeError: "),
    ("a JSON line nested 100,000 deep", ["{tmp}/deep.jsonl", "--name", "s", *COLUMNS],
     "{tmp}/deep.jsonl: line 1 is nested deeper than Python can parse; not a table of runs"),
    ("a Parquet file that is not one", ["{tmp}/bad.parquet", "--name", "s", *COLUMNS],
     "{tmp}/bad.parquet: not a readable Parquet file (ArrowInvalid: "),
    ("a CSV that is not UTF-8", ["{tmp}/latin.csv", "--name", "s", *COLUMNS],
     "{tmp}/latin.csv: not UTF-8 text (byte b'\\xe9' at position 34); save the table as UTF-8"),
    ("a named column not in the table", ["{tmp}/runs.csv", "--name", "s", "--scale", "width", "--lr", "learning_rate",
                                         "--loss", "loss"],
     "--lr learning_rate: no such column in {tmp}/runs.csv (did you mean 'learning_rate_x'?); valid: learning_rate_x, "
     "loss, lr, seed, width"),
    ("a scale column not in the table", ["{tmp}/runs.csv", "--name", "s", "--scale", "width=n_embd", "--lr", "lr",
                                         "--loss", "loss"],
     "--scale width n_embd: no such column in {tmp}/runs.csv; valid: learning_rate_x, loss, lr, seed, width"),
    ("a name that leaves the results folder", ["{tmp}/runs.csv", "--name", "../x", *COLUMNS],
     "--name '../x' must be a folder name inside the results folder (no '/', not starting with '.')"),
    ("a study folder that holds records", ["{tmp}/runs.csv", "--name", "keep", *COLUMNS],
     "{finished}/keep already holds a study (1 record(s)); --append adds this table's runs to it, or choose another --name"),
    ("a column name that is no key", ["{tmp}/runs.csv", "--name", "s", "--scale", "model size", "--lr", "lr", "--loss",
                                      "loss"],
     "--scale 'model size': the column's name 'model size' is no config key (letters, digits, _ and dots); give "
     "--scale KEY=COL, e.g. --scale width=model size"),
    ("lrtransfer's own key", ["{tmp}/runs.csv", "--name", "s", *COLUMNS, "--group", "seed=seed"],
     "--group 'seed=seed': seed is lrtransfer's own key"),
    ("a column named twice", ["{tmp}/runs.csv", "--name", "s", "--scale", "width", "--lr", "lr", "--loss", "lr"],
     "column 'lr' is named twice (--lr and --loss); each column is one thing"),
    ("no scale", ["{tmp}/runs.csv", "--name", "s", "--lr", "lr", "--loss", "loss"], "give the scale column: --scale width=COL"),
    ("no name", ["{tmp}/runs.csv", *COLUMNS], "Missing option '--name'"),
    ("no usable row", ["{tmp}/empty_losses.csv", "--name", "s", *COLUMNS],
     "{tmp}/empty_losses.csv: no row is a usable run (2 no loss; line 2: loss is empty (no loss: a run that never "
     "reported one; a diverged run's is NaN or inf)); nothing written"),
    ("an empty results folder", ["{tmp}/runs.csv", "--name", "s", *COLUMNS, "--results-dir", ""],
     "--results-dir '' is empty: give a folder (the default: results)"),
    ("a FIFO as the table", ["{tmp}/fifo.csv", "--name", "s", *COLUMNS],
     "{tmp}/fifo.csv: not a regular file (a FIFO); give the table of runs"),
]


def _tables(tmp):
    (tmp / "runs.csv").write_text("width,lr,seed,loss,learning_rate_x\n64,0.001,0,2.5,0\n")
    (tmp / "runs.txt").write_text("width,lr,loss\n64,0.001,2.5\n")
    (tmp / "broken.jsonl").write_text('{"width": 64, "lr": 0.001, "loss": 2.5}\n{"width": 64, "lr":\n')
    (tmp / "deep.jsonl").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (tmp / "bad.parquet").write_bytes(b"PAR1 not really")
    (tmp / "latin.csv").write_bytes("width,lr,loss,param\n64,0.001,2.5,d\xe9j\xe0\n".encode("latin-1"))
    (tmp / "empty_losses.csv").write_text("width,lr,loss\n64,0.001,\n64,0.002,\n")
    os.mkfifo(tmp / "fifo.csv")


@pytest.mark.parametrize("case, args, fragment", IMPORT, ids=[c[0] for c in IMPORT])
def test_bad_import_input(cli, finished, tmp_path, deadline, case, args, fragment):
    """One line, exit 2, and nothing written: no study folder, the finished study untouched."""
    _tables(tmp_path)
    before = {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()}
    subs = {"tmp": str(tmp_path), "finished": str(finished)}
    code, out, err = cli("import", "--results-dir", str(finished), *[a.format(**subs) for a in args])  # a case may give its own
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (out, err)
    assert fragment.format(**subs) in lines[0], lines[0]
    assert {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("value", ["2", "0", "'on'"])
def test_a_boolean_key_in_a_yaml_file_takes_only_a_boolean(cli, tmp_path, value):
    """`layer_norm: 2` in a study file of the user's own (or an option's file they edited) was read as
    true without a word, as `model.layer_norm=2` on the command line was before it was refused."""
    (tmp_path / "study").mkdir()
    study = tmp_path / "study" / "mine.yaml"
    study.write_text(f"# @package _global_\ndefaults:\n  - override /model: resnet\nmodel:\n  layer_norm: {value}\n")
    code, _, err = cli("sweep", "--config-dir", str(tmp_path), "study=mine", *TINY, f"results_dir={tmp_path / 'r'}")
    shown = {"2": "2", "0": "0", "'on'": "'on'"}[value]
    assert code == 2 and err == f"error: model.layer_norm: {shown} in {study} is not a boolean; valid: true, false\n", err
    assert not (tmp_path / "r").exists()
    study.write_text("# @package _global_\ndefaults:\n  - override /model: resnet\nmodel:\n  layer_norm: true\n")
    assert cli("sweep", "--config-dir", str(tmp_path), "study=mine", *TINY, "--plan", f"results_dir={tmp_path / 'r'}")[0] == 0
