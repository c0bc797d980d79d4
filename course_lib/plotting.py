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
