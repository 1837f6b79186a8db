"""Categories of the training step's ops, from the node names a TF profile reports.

Used by bench/profile_step.py. A node name carries the name scopes of the
code that made it: Keras layer scopes ("transformer_xllm_1/block_0_1/
attention_1/einsum_5/Einsum"), the tape's "gradient_tape/" prefix on backward
ops (followed by the forward op's scope), the call op of a nested tf.function
("StatefulPartitionedCall/", the trainer's forward/backward function inlined
into its step), and "/_<n>/" where a control-flow op's inlined body starts
("cond/then/_132/cond/adam/truediv", ".../switch_case/indexed_case/branch0/_688/...").
`classify` maps a name to one of CATEGORIES; `GradientSums` attributes the
sums the tape creates without a scope, through the traced graph.
"""

import collections
import os
import re

from model.transformer_xl import blocks

ATTENTION, FEED_FORWARD, SOFTMAX = "attention", "feed-forward", "adaptive softmax"
EMBEDDING, DROPOUT, LAYER_NORM = "embeddings", "dropout", "layer norm"
SEARCH, CLIPPING, OPTIMIZER = "architecture/search", "gradient clipping", "optimizer update"
MEMORY, OTHER = "memory handling", "other"
CATEGORIES = {
    ATTENTION: "relative attention: q/k/v/position projections, scores, rel_shift, causal "
               "softmax over keys, context, output projection, the [mem; x] concat",
    FEED_FORWARD: "position-wise feed-forward: inner and output dense, ReLU",
    SOFTMAX: "adaptive softmax: head and tail logits, cross-entropies, token partition "
             "and stitch, the loss sum",
    EMBEDDING: "embedding lookup, its sqrt(D) scale and its (sparse) gradient",
    DROPOUT: "every FastDropout: random bytes, keep masks, the masked products",
    LAYER_NORM: "layer normalisation (moments, scale, offset) of every sub-layer",
    SEARCH: "supernet only: Gumbel noise, mixing weights, the weighted sum of the candidates "
            "(soft) or the switch and straight-through factor (hard), identity branch",
    CLIPPING: "global norms of the gradient groups and the clipping products",
    OPTIMIZER: "optimizer apply (Adam moments and updates, its learning rate)",
    MEMORY: "update_memory: concat of [memory; block input], keep the last mem_len, "
            "stop_gradient",
    OTHER: "anything else: step counters, learning-rate and tau schedules, finiteness checks",
}

_CALL = re.compile(r"^(?:Stateful)?PartitionedCall(?:_\d+)?$")
_BODY = re.compile(r"/_\d+/")  # joins a control-flow op's name to its inlined body's nodes
_GRADIENT = re.compile(r"^(?:gradient_tape|gradients?)(?:_\d+)?$")
_LAYER_SCOPES = (  # a component naming a layer (Keras adds _1, _2 on re-traces)
    (re.compile(r"dropout(?:_\d+)?$"), DROPOUT),
    (re.compile(r"(?:^|_)layer_norm(?:_\d+)?$"), LAYER_NORM),
    (re.compile(r"(?:^|_)attention(?:_\d+)?$"), ATTENTION),
    (re.compile(r"(?:^|_)dense(?:_\d+)?$"), FEED_FORWARD),
    (re.compile(r"^embedding(?:_\d+)?$"), EMBEDDING),
    (re.compile(r"^softmax(?:_\d+)?$"), SOFTMAX),
)
_BRANCH = re.compile(r"^branch(\d+)$")  # a switch_case branch (function body)
_BLOCK = re.compile(r"^block_\d+(?:_\d+)?$")  # a StochasticBlock, outside its candidates
_MEMORY = re.compile(r"^(?:concat|strided_slice|StopGradient)(?:_\d+)?$")
_OPTIMIZER = re.compile(r"^cond(?:_\d+)?$")  # the step applies each group in a tf.cond
_CLIPPING = re.compile(r"^(?:clip_by_global_norm|global_norm)(?:_\d+)?$")
GRADIENT_SUM_TYPES = ("AddN", "UnsortedSegmentSum")  # unscoped sums made by the tape


def _layer_category(component):
    for pattern, category in _LAYER_SCOPES:
        if pattern.search(component):
            return category
    return None


def scope_category(name):
    """Category implied by the name scopes of a node name, or None.

    The innermost layer scope wins (".../attention/output_dropout/Mul" is
    dropout); then the candidate of an enclosing switch_case branch (hard
    search runs each candidate as an inlined function body, named
    ".../indexed_case/branch0/_796/<node of the body>");
    then a StochasticBlock scope (search machinery).
    """
    segments = [[c for c in s.split("/") if c] for s in _BODY.split(name)]
    components = [c for s in segments for c in s]
    for component in reversed(components):
        category = _layer_category(component)
        if category:
            return category
    for segment in reversed(segments[:-1]):
        match = _BRANCH.match(segment[-1]) if segment else None
        names = blocks.names()
        if match and int(match.group(1)) < len(names):
            return _layer_category(names[int(match.group(1))]) or SEARCH
    if any(_BLOCK.match(c) for c in components):
        return SEARCH
    return None


def classify(name, op_type, model_scope="transformer_xllm", gradient_sums=None):
    """Category of one op event of the training step.

    Args:
        name: the node name as the profiler reports it (without ":<type>").
        op_type: the op type (e.g. "_MklEinsum", "AddN").
        model_scope: the model's name scope (its Keras name).
        gradient_sums: a `GradientSums` to attribute unscoped gradient sums
            through the graph, or None (they count as other).

    Returns:
        one key of CATEGORIES.
    """
    parts = [c for c in _BODY.split(name)[0].split("/") if c]
    if not parts or not _CALL.match(parts[0]):  # the step function itself
        if _OPTIMIZER.match(parts[0] if parts else ""):
            return OPTIMIZER
        if parts and _CLIPPING.match(parts[0]):
            return CLIPPING
        return OTHER
    category = scope_category(name)  # inside the forward/backward function
    if category:
        return category
    scopes = [c for c in parts[1:] if not _GRADIENT.match(c)]
    if len(scopes) > 1 and re.match(re.escape(model_scope) + r"(?:_\d+)?$", scopes[0]):
        if _MEMORY.match(scopes[1]):
            return MEMORY
        if re.match(r"mul(?:_\d+)?$", scopes[1]):  # embedding * sqrt(D)
            return EMBEDDING
        return OTHER
    if op_type in GRADIENT_SUM_TYPES:
        return gradient_sums.category(name, model_scope) if gradient_sums else OTHER
    return SOFTMAX  # the loss: AdaptiveSoftmax.nll runs without a name scope


class GradientSums:
    """Attributes the tape's unscoped gradient sums to the scope of their inputs.

    Args:
        inputs: dict full node name ("<call>/<node>") -> input node names (full).
        op_types: dict full node name -> op type.
    """

    def __init__(self, inputs, op_types):
        self.inputs, self.op_types = inputs, op_types
        self._known = {}

    @classmethod
    def from_concrete_function(cls, concrete_function):
        """From the traced step: the bodies of the functions its call ops run."""
        graph_def = concrete_function.graph.as_graph_def()
        functions = {f.signature.name: f for f in graph_def.library.function}
        inputs, op_types = {}, {}
        for call in graph_def.node:
            body = functions.get(call.attr["f"].func.name) if "f" in call.attr else None
            if body is None:
                continue
            for node in body.node_def:
                full = f"{call.name}/{node.name}"
                op_types[full] = node.op
                inputs[full] = [f"{call.name}/{i.split(':')[0]}" for i in node.input
                                if not i.startswith("^")]
        return cls(inputs, op_types)

    @property
    def counts(self):
        """dict: distinct gradient sums attributed, and those not found in the graph."""
        found = sum(name in self.inputs for name in self._known)
        return dict(attributed=found, not_in_graph=len(self._known) - found)

    def category(self, name, model_scope):
        """Category of a gradient sum node (full name); other when it is not in the graph.

        The category its inputs agree on; when they disagree, that of their
        common name scope (a sum within one block's scope, such as the
        gradient of a soft-search block's input, which every candidate
        reads, is that block's); failing that, the most frequent one.
        """
        return self._attribute(name, model_scope, 0)[0]

    def _attribute(self, name, model_scope, depth):
        """(category, scope components) of a gradient sum; memoised."""
        if name not in self._known:
            inputs = self.inputs.get(name)
            if not inputs or depth > 50:
                self._known[name] = (OTHER, name.split("/")[:-1])
            else:
                self._known[name] = self._combine(inputs, model_scope, depth)
        return self._known[name]

    def _combine(self, inputs, model_scope, depth):
        categories, scopes = [], []
        for i in inputs:
            if self.op_types.get(i) in GRADIENT_SUM_TYPES:  # a sum of sums: its own scope
                category, scope = self._attribute(i, model_scope, depth + 1)
            else:
                category, scope = classify(i, self.op_types.get(i, ""), model_scope), i.split("/")
            categories.append(category)
            scopes.append(scope)
        common = os.path.commonprefix(scopes)
        known = [c for c in categories if c != OTHER]
        if len(set(known)) == 1:
            return known[0], common
        category = scope_category("/".join(common)) if common else None
        if category:
            return category, common
        return (collections.Counter(known).most_common(1)[0][0] if known else OTHER), common


def short_name(name, model_scope="transformer_xllm", per_variable=False):
    """A node name for reports, the same for every block.

    Keeps the innermost function body, writes block indices as `*` and drops
    Keras' re-trace suffixes of model and layer scopes ("attention_1"), but
    keeps those of ops ("einsum_5" is another einsum than "einsum_4"), unless
    `per_variable` (optimizer and clipping ops repeat once per variable).
    """
    segments = _BODY.split(name)
    parts = [c for c in segments[-1].split("/") if c and not _CALL.match(c)]
    if len(segments) > 1 and "indexed_case" in parts:  # a hard-search branch body
        last = len(parts) - 1 - parts[::-1].index("indexed_case")
        parts = ["gradient_tape"] * parts[0].startswith("gradient") + [
            "block_*", "switch_case"] + parts[last + 1:]
    model = re.compile(re.escape(model_scope) + r"(?:_\d+)?$")
    out = []
    for c in parts:
        if model.match(c):  # the third model built in a process is "transformer_xllm_2"
            c = re.sub(r"(?:_\d+)+$", "", c)
        elif per_variable or _layer_category(c) or _BLOCK.match(c):
            c = re.sub(r"_\d+$", "", c)
        out.append(re.sub(r"^block_\d+", "block_*", c))
    return "/".join(out)
