"""Figures shared by the notebooks: labelled heatmaps for attention weights and masks."""
import matplotlib.pyplot as plt
import torch


def heatmap(matrix, row_labels=None, col_labels=None, ax=None, title=None, cmap="viridis", annotate=None, vmin=None, vmax=None):
    """Draw a 2-D tensor with its rows and columns labelled.

    matrix: (rows, cols); annotate prints each value in its cell (default: small matrices only).
    """
    m = matrix.detach().float().cpu() if isinstance(matrix, torch.Tensor) else torch.as_tensor(matrix, dtype=torch.float32)
    if ax is None:
        size = max(3.0, 0.45 * m.shape[1] + 1.5), max(2.5, 0.4 * m.shape[0] + 1.0)
        _, ax = plt.subplots(figsize=size)
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), labels=row_labels)
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), labels=col_labels, rotation=60, ha="right")
    if annotate is None:
        annotate = m.numel() <= 150
    if annotate:
        hi = m.max().item() if vmax is None else vmax
        lo = m.min().item() if vmin is None else vmin
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                value = m[i, j].item()
                light = value < lo + 0.6 * (hi - lo)
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color="white" if light else "black")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_heatmap(weights, query_tokens, key_tokens, ax=None, title="attention weights"):
    """weights: (T_q, T_k); rows are queries, columns the keys they attend to."""
    ax = heatmap(weights, query_tokens, key_tokens, ax=ax, title=title, vmin=0.0, vmax=1.0)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    return ax


def attention_grid(maps, src_tokens, tgt_tokens, title=None):
    """Every head of every layer of one example: one row a layer, one column a head.

    maps: {kind: [per layer (h, T_q, T_k)]} with the kinds of course_lib.transformer.attention_maps;
    src_tokens: the T_src source labels; tgt_tokens: the T_tgt labels of the decoder's positions
    """
    labels = {"encoder self-attention": (src_tokens, src_tokens), "decoder self-attention": (tgt_tokens, tgt_tokens),
              "cross-attention": (tgt_tokens, src_tokens)}
    rows = [(kind, i, w.detach().float().cpu()) for kind, layers in maps.items() for i, w in enumerate(layers)]
    h = rows[0][2].size(0)
    fig, axes = plt.subplots(len(rows), h, figsize=(2.3 * h + 1.2, 2.3 * len(rows)), squeeze=False, layout="constrained")
    for r, (kind, i, w) in enumerate(rows):
        queries, keys = labels[kind]
        for j, ax in enumerate(axes[r]):
            image = ax.imshow(w[j], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(keys)), labels=keys, fontsize=6, rotation=90)
            ax.set_yticks(range(len(queries)), labels=queries if j == 0 else [], fontsize=6)
            if r == 0:
                ax.set_title(f"head {j + 1}", fontsize=9)
        axes[r, 0].set_ylabel(f"{kind}\nlayer {i + 1}", fontsize=9)
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def sequence_tree(table, names, max_len, paths=(), ax=None, title=None, end="<eos>"):
    """Every target a table of next-token probabilities can write, as a tree from <bos> (left) to the ends (right).

    table: {prefix (a tuple of token names): {name: probability of that next token}}; a prefix the table lacks, or
    one that ends with `end` or has max_len tokens, is a leaf, labelled with its probability (the product along
    its branch). names: the token names in the order their branches are drawn. paths: [(target (a tuple of
    names), colour, label)], drawn thick over the tree.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(2.6 * (max_len + 1), 4.5))
    leaves, place = [], {}

    def lay(prefix, p):
        children = [] if prefix and (prefix[-1] == end or len(prefix) == max_len) else \
            [(n, q) for n, q in ((n, table.get(prefix, {}).get(n, 0.0)) for n in names) if q > 0]
        for n, q in children:
            lay(prefix + (n,), p * q)
        place[prefix] = (len(prefix), -len(leaves) if not children else sum(place[prefix + (n,)][1] for n, _ in children) / len(children))
        if not children:
            leaves.append((prefix, p))

    lay((), 1.0)
    for prefix, (x, y) in place.items():
        if prefix:
            px, py = place[prefix[:-1]]
            ax.plot([px, x], [py, y], color="lightgray", lw=1.2, zorder=1)
            q = table[prefix[:-1]][prefix[-1]]
            ax.text((px + x) / 2, (py + y) / 2, f"{prefix[-1]} {q:.2f}", fontsize=8, ha="center", va="bottom",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"), zorder=3)
    for prefix, p in leaves:
        x, y = place[prefix]
        ax.text(x + 0.08, y, f"{' '.join(prefix)}   p = {p:.3f}", fontsize=8, va="center")
    for target, colour, label in paths:
        xs, ys = zip(*(place[tuple(target[:i])] for i in range(len(target) + 1)))
        ax.plot(xs, ys, color=colour, lw=3, alpha=0.8, zorder=2, label=label)
    ax.scatter(*zip(*place.values()), s=18, color="black", zorder=4)
    ax.set_xticks(range(max_len + 1), ["<bos>"] + [f"step {t}" for t in range(1, max_len + 1)])
    ax.set_yticks([])
    ax.set_xlim(-0.2, max_len + 1.1)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    if paths:
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.1), ncol=len(paths), fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax
