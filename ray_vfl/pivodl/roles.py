"""What a PIVODL client does in one level of a tree, role by role (steps 3-6 of the protocol).

:class:`SourceRole` -- a client as the source of its own features: per node it offers the candidates
the instance threshold admits (:mod:`ray_vfl.pivodl.threshold`) under fresh temporary record numbers,
telling each client only which of *its* labelled rows go left at each record; it adds every client's
encrypted candidate sums, keeps the winning split in its lookup table and broadcasts the partition.
Every client also sums its own labelled rows' gradients for every source's candidates
(:meth:`SourceRole.sum_candidates`: the member's part) and moves its rows by the partitions.

:class:`SplitRole` -- a client as the split client of other sources' nodes: it decrypts the sums
it is sent (labelled by record numbers only), scores them with the shared kernels, compares its
best gains with the other split clients, tells a source its winning records, and computes,
clips and noises the weights of the leaves it holds.

The tables of who sends what to whom are in :mod:`ray_vfl.pivodl.protocol`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.timeline import span_if, timed
from ..trees.categorical import goes_left_of_set
from ..trees.kernels import goes_left, is_splittable, leaf_weights, split_gains, ties_with
from .candidates import CATEGORY
from .messages import fetch
from .partition import first_tied, prefix_cuts
from .threshold import left_members, offered

__all__ = ["SourceRole", "SplitRole"]


def _encrypt_job(job: list, spec: tuple, keys: dict) -> list:
    """Task on a client's own pool: encrypt packed candidate sums, one ``(split client, g, h)`` per item."""
    from ..crypto import get_backend

    backend = get_backend(spec[0], **spec[1])
    return [backend.encrypt_gh_sums(keys[c], g, h) for c, g, h in job]


class SourceRole:
    """A client as the source of its own features, and as a member summing its own rows."""

    # -- step 3: the source's offers ----------------------------------------------------------------------
    def propose(self, depth: int, nodes: list[int], split: list[int]) -> tuple:
        """For every open node (scored by split client ``split[i]``, dealt by the driver): the candidates the
        instance threshold admits, under fresh record numbers in a random order (record ``r`` is candidate
        ``records[r]``); each other client gets, per node, its split client and which of the receiver's own
        labelled rows of the node go left at each record. No feature, threshold or order goes with them."""
        nodes = np.asarray(nodes, dtype=np.int64)
        split = np.asarray(split, dtype=np.int64)
        bins = self.rows["train"]
        records, bits = [], {p: [] for p in self.others}
        self._own_members = []
        self._groups, self._pools = {}, {}
        for node in nodes.tolist():
            rows = np.flatnonzero(self.node_of_row == node)
            owner = self.client_of_row[rows]
            kept, pool = offered(bins[rows], self.candidates, self.missing_bin, owner, len(self.order),
                                 self.config.instance_threshold)
            heads = np.flatnonzero(kept & (pool == np.arange(len(pool))))  # a pool of small categories: one record
            shuffled = heads[self.rng.permutation(len(heads))]
            records.append(shuffled)
            self._groups[node] = self._group_records(shuffled)
            self._pools[node] = {int(h): np.flatnonzero(pool == h) for h in np.unique(pool[pool != np.arange(len(pool))])}
            members = left_members(bins[rows], self.candidates.take(shuffled), self.missing_bin)
            for r in np.flatnonzero(np.isin(shuffled, list(self._pools[node]))).tolist():
                pooled = self.candidates.take(self._pools[node][int(shuffled[r])])
                members[r] = left_members(bins[rows], pooled, self.missing_bin).any(axis=0)
            for p in self.others:
                bits[p].append(np.packbits(members[:, owner == self.order.index(p)], axis=1))
            self._own_members.append(members[:, owner == self.order.index(self.name)].view(np.uint8))
        self.requests = {self.name: (nodes, split, [len(r) for r in records])}
        self.offers = (nodes, split, records)
        tree = len(self.trees) - 1
        return (None, *[self.mailbox.send("pivodl_candidate_request", [p], {"node": nodes, "split": split, "bits": bits[p]},
                                          tree, depth) for p in self.others])

    def _group_records(self, records: np.ndarray) -> np.ndarray:
        """Per offered record, its partition feature as a group number (features numbered in a fresh random
        order per node), -1 for a candidate: all a split client is told of the category records."""
        cand = self.candidates
        category = cand.kind[records] == CATEGORY
        features = np.unique(cand.feature[records][category])
        number = self.rng.permutation(len(features))
        group = np.full(len(records), -1, dtype=np.int64)
        group[category] = number[np.searchsorted(features, cand.feature[records][category])]
        return group

    # -- step 4: every client sums its own labelled rows for every source --------------------------------
    def sum_candidates(self, depth: int, requests: list) -> tuple:
        """Left-branch sums of this client's labelled rows for every source's records, plus the node total
        as the last entry; each encrypted under the node's split client's key. A record whose left or right
        branch holds between 1 and ``instance_threshold - 1`` of this client's rows of the node is refused
        (its sum is sent as 0 and flagged, and the source drops it); an honest source never offers one."""
        tree = len(self.trees) - 1
        own_node = self.node_of_row[self.own]
        ctx = {"open_nodes": set(self.open_nodes), "n_clients": len(self.order),
               "own_rows": np.bincount(own_node, minlength=max(self.open_nodes) + 1)}
        members = {}
        for msg in fetch(requests):
            p = self.mailbox.open(msg, "pivodl_candidate_request", {**ctx, "sender_index": self.order.index(msg.sender)},
                                  self.others)
            self.requests[msg.sender] = (p["node"], p["split"], [len(b) for b in p["bits"]])
            members[msg.sender] = [np.unpackbits(b, axis=1, count=int(ctx["own_rows"][n]))
                                   for n, b in zip(p["node"].tolist(), p["bits"])]
        members[self.name] = self._own_members
        thr = self.config.instance_threshold
        self._own_plain = {}
        jobs, where, refused = [], [], []
        for source in self.order:
            nodes, split, _ = self.requests[source]
            for node, c, left in zip(nodes.tolist(), split.tolist(), members[source]):
                mine = np.flatnonzero(own_node == node)
                g_mine, h_mine = self.g[mine], self.h[mine]
                # 0/1 times gradient pairs: the sums are exact on the gradients' grid, in any order
                G, H = (left.astype(np.float64) @ np.column_stack([g_mine, h_mine])).T
                rows = left.sum(axis=1, dtype=np.int64)
                bad = ((rows > 0) & (rows < thr)) | ((len(mine) - rows > 0) & (len(mine) - rows < thr))
                G[bad], H[bad] = 0.0, 0.0
                g = np.append(G, g_mine.sum())
                h = np.append(H, h_mine.sum())
                if self.record_view and self.order[c] == self.name:
                    self._own_plain[(source, node)] = (g, h)
                jobs.append((self.order[c], g, h))
                where.append((source, node))
                refused.append(np.packbits(bad))
        ciphers = self._encrypt(jobs)
        out = {s: {"node": [], "ciphers": [], "refused": []} for s in self.order}
        for (source, node), c, bad in zip(where, ciphers, refused):
            out[source]["node"].append(node)
            out[source]["ciphers"].append(c)
            out[source]["refused"].append(bad)
        self._own_sums = out[self.name]
        msgs = [self.mailbox.send("pivodl_candidate_sums", [s], {**out[s], "node": np.asarray(out[s]["node"], dtype=np.int64)},
                                  tree, depth) for s in self.others]
        return (None, *msgs)

    @timed("crypto", when=lambda self: self.backend.is_encrypted)
    def _encrypt(self, jobs: list) -> list:
        keys = {c: self.peer_pk[c] for c in {c for c, _, _ in jobs}}
        entries = sum(len(g) for _, g, _ in jobs)
        per = {c: max(1, self.backend.slots_per_ciphertext(k)) for c, k in keys.items()}
        self.ops["encrypt"] += sum(-(-len(g) // per[c]) for c, g, _ in jobs)
        if self.pool.workers <= 1 or not self.backend.is_encrypted or entries < 64 * self.pool.workers:
            return _encrypt_job(jobs, self.backend_spec, keys)
        chunks = self.pool.balance([len(g) for _, g, _ in jobs])
        parts = self.pool.map(_encrypt_job, [[jobs[i] for i in chunk] for chunk in chunks], self.backend_spec, keys)
        out: list = [None] * len(jobs)
        for chunk, part in zip(chunks, parts):
            for i, c in zip(chunk, part):
                out[i] = c
        return out

    # -- step 4, at the source: add every client's sums, forward them by record number --------------------
    def forward(self, depth: int, sums: list) -> tuple:
        """Add every client's ciphertexts per node (this client's own included) and send each split client
        the nodes it scores: ciphertexts in record order and which records were refused, nothing else."""
        tree = len(self.trees) - 1
        nodes, split, counts = self.requests[self.name]
        count = dict(zip(nodes.tolist(), counts))
        total = {n: c for n, c in zip(self._own_sums["node"], self._own_sums["ciphers"])}
        dropped = {n: np.unpackbits(b, count=count[n]).astype(bool)
                   for n, b in zip(self._own_sums["node"], self._own_sums["refused"])}
        splitter = dict(zip(nodes.tolist(), [self.order[c] for c in split.tolist()]))
        for msg in fetch(sums):
            ctx = {"nodes": nodes, "backend": self.backend, "public_keys": [self.peer_pk[splitter[n]] for n in nodes.tolist()],
                   "records": counts}
            p = self.mailbox.open(msg, "pivodl_candidate_sums", ctx, self.others)
            with span_if("crypto", self.backend.is_encrypted):
                for n, c, bad in zip(p["node"].tolist(), p["ciphers"], p["refused"]):
                    total[n] = self.backend.add(self.peer_pk[splitter[n]], total[n], c)
                    self.ops["add"] += len(c)
                    dropped[n] |= np.unpackbits(bad, count=count[n]).astype(bool)
        out = []
        for p in self.others:
            mine = [n for n in nodes.tolist() if splitter[n] == p]
            payload = {"node": np.asarray(mine, dtype=np.int64), "ciphers": [total[n] for n in mine],
                       "dropped": [np.packbits(dropped[n]) for n in mine], "group": [self._groups[n] for n in mine]}
            out.append(self.mailbox.send("pivodl_forwarded_sums", [p], payload, tree, depth) if mine else None)
        return (None, *out)

    # -- step 5, at the source: the winning split into the lookup table -----------------------------------
    def apply_wins(self, depth: int, wins: list) -> tuple:
        """For each node a split client says this client won: the first candidate (in the reference order)
        among the tied records becomes a record of the lookup table; the partition of the node's rows goes
        to every client, the chosen record number to the split client alone."""
        tree = len(self.trees) - 1
        nodes, _, offered = self.offers
        order_of = dict(zip(nodes.tolist(), offered))
        cand = self.candidates
        ctx = {"nodes": nodes, "records": {n: len(r) for n, r in order_of.items()},
               "category_feature": {n: np.where(cand.kind[r] == CATEGORY, cand.feature[r], -1) for n, r in order_of.items()}}
        bins = self.rows["train"]
        won, records, lefts, chosen = [], [], [], {}
        for msg in fetch(wins):
            p = self.mailbox.open(msg, "pivodl_split_won", ctx, self.others)
            for node, tied, cuts in zip(p["node"].tolist(), p["records"], p["cuts"]):
                order = order_of[node]
                f, b, dl, left_set, choice = first_tied(self.candidates, order, tied, cuts, self.n_bins - 1,
                                                        self._pools.get(node, {}))
                rows = np.flatnonzero(self.node_of_row == node)
                if left_set is None:
                    self.lookup.append((f, b, dl, self.binner.threshold(f, b)))
                    lefts.append(goes_left(bins[rows, f], b, dl, self.missing_bin))
                else:  # a categorical split: the set stays here, in the lookup table
                    self.lookup.append((f, b, dl, float("nan"), np.flatnonzero(left_set).tolist()))
                    lefts.append(goes_left_of_set(bins[rows, f], left_set, dl, self.missing_bin))
                won.append(node)
                records.append(len(self.lookup) - 1)
                chosen.setdefault(msg.sender, []).append((node, choice))
        partition = None
        if won:
            payload = {"node": np.asarray(won, dtype=np.int64), "record": np.asarray(records, dtype=np.int64),
                       "bits": np.packbits(np.concatenate(lefts))}
            partition = self.mailbox.send("pivodl_partition", self.others, payload, tree, depth)
            self._take_partition(self.name, payload)
        told = []
        for p in self.others:
            pairs = chosen.get(p)
            told.append(None if not pairs else self.mailbox.send(
                "pivodl_chosen_record", [p], np.asarray(pairs, dtype=np.int64).reshape(-1, 2), tree, depth))
        return (None, partition, *told)

    # -- step 5, at every client: move the rows by the partitions ------------------------------------------
    def apply_partitions(self, depth: int, partitions: list, next_id: int) -> list[tuple[int, int, int]]:
        """Take every source's partitions; children get ids from ``next_id`` on, in the order of their
        parents' ids (every client assigns the same). Returns ``(parent, left, right)`` of each split."""
        rows = np.bincount(self.node_of_row, minlength=max(self.open_nodes) + 1)
        ctx = {"node_rows": {n: int(rows[n]) for n in self.open_nodes}}
        for msg in fetch(partitions):
            self._take_partition(msg.sender, self.mailbox.open(msg, "pivodl_partition", ctx, self.others))
        splits = sorted(self._pending)
        moves = []
        for i, node in enumerate(splits):
            source, record, left = self._pending[node]
            l_child, r_child = next_id + 2 * i, next_id + 2 * i + 1
            rows = np.flatnonzero(self.node_of_row == node)
            self.node_of_row[rows[left]] = l_child
            self.node_of_row[rows[~left]] = r_child
            self.trees[-1][node] = ("split", source, record, l_child, r_child)
            moves.append((node, l_child, r_child))
        self._pending = {}
        return moves

    def _take_partition(self, source: str, p: dict) -> None:
        pending = getattr(self, "_pending", None)
        if pending is None:
            self._pending = pending = {}
        counts = np.bincount(self.node_of_row, minlength=int(p["node"].max(initial=0)) + 1)[p["node"]].tolist()
        bits = np.unpackbits(p["bits"], count=sum(counts)).astype(bool)
        for node, record, left in zip(p["node"].tolist(), p["record"].tolist(), np.split(bits, np.cumsum(counts)[:-1])):
            pending[node] = (source, record, left)

    def set_open_nodes(self, nodes: list[int]) -> None:
        self.open_nodes = list(nodes)


class SplitRole:
    """A client as the split client of other sources' nodes, and as the holder of leaves."""

    def score(self, depth: int, forwarded: list) -> tuple:
        """Decrypt the sums of every (source, node) this client scores; keep each one's best gain (refused
        records excluded) and tell every other client (the split clients compare their best gains)."""
        tree = len(self.trees) - 1
        cfg = self.config
        sources, nodes, gains, work = [], [], [], []
        for msg in fetch(forwarded):
            offered, _, counts = self.requests[msg.sender]
            ctx = {"backend": self.backend, "public_key": self.pk, "open_nodes": set(self.open_nodes),
                   "records_of": dict(zip(offered.tolist(), counts))}
            p = self.mailbox.open(msg, "pivodl_forwarded_sums", ctx, self.others)
            work += [(msg.sender, node, c, bad, grp)
                     for node, c, bad, grp in zip(p["node"].tolist(), p["ciphers"], p["dropped"], p["group"])]
        with span_if("crypto", self.backend.is_encrypted):
            sums = self.backend.decrypt_gh_many(self.sk, [w[2] for w in work]) if work else []
        self.ops["decrypt"] += sum(len(w[2]) for w in work)
        for (source, node, c, bad, group), (GL, HL) in zip(work, sums):
            G, H = GL[-1], HL[-1]
            GL, HL = GL[:-1], HL[:-1]
            gain = split_gains(GL, HL, G - GL, H - HL, G, H, cfg.reg_lambda, cfg.min_child_weight)
            dropped = np.unpackbits(bad, count=len(GL)).astype(bool)
            gain[dropped | (group >= 0)] = -np.inf  # a category record is no candidate: its group's prefixes are
            cuts = {}
            for g in np.unique(group[group >= 0]).tolist():
                members = np.flatnonzero(group == g)
                if not dropped[members].any():
                    cuts[g] = prefix_cuts(GL, HL, G, H, members, cfg.reg_lambda, cfg.min_child_weight,
                                          cfg.max_cat_threshold)
            self.scored[(source, node)] = (GL, HL, G, H, gain, cuts)
            if self.record_view:
                own_g, own_h = self._own_plain[(source, node)]
                self.view_sums.append({"tree": tree, "source": source, "node": node, "GL": GL, "HL": HL, "G": G, "H": H,
                                       "dropped": dropped, "group": group,
                                       "rows": np.flatnonzero(self.node_of_row == node),
                                       "own_GL": own_g[:-1], "own_HL": own_h[:-1], "own_G": own_g[-1], "own_H": own_h[-1]})
            best = max([gain.max(initial=-np.inf)] + [float(cut.gain.max(initial=-np.inf)) for cut in cuts.values()])
            sources.append(self.order.index(source))
            nodes.append(node)
            gains.append(best)
        payload = {"source": np.asarray(sources, dtype=np.int64), "node": np.asarray(nodes, dtype=np.int64),
                   "gain": np.asarray(gains, dtype=np.float64)}
        self._bests = {self.name: payload}
        return None, self.mailbox.send("pivodl_best_gains", self.others, payload, tree, depth)

    def decide(self, depth: int, bests: list) -> tuple:
        """Every client compares the best gains it was told (the same everywhere, so the same outcome):
        per node the best gain wins, ties to the first source in client order. The winning split client
        sends the source the records tied with it; a node whose best gain does not pass ``gamma`` and
        ``min_child_weight`` becomes a leaf, held by the split client of its first source."""
        tree = len(self.trees) - 1
        ctx = {"open_nodes": set(self.open_nodes), "n_clients": len(self.order)}
        for msg in fetch(bests):
            self._bests[msg.sender] = self.mailbox.open(msg, "pivodl_best_gains", ctx, self.others)
        per_node: dict[int, list[tuple[int, str, float]]] = {}
        for splitter, p in self._bests.items():
            for s, n, g in zip(p["source"].tolist(), p["node"].tolist(), p["gain"].tolist()):
                per_node.setdefault(n, []).append((s, splitter, g))
        wins: dict[str, list] = {}
        leaves = []
        for node in sorted(per_node):
            entries = sorted(per_node[node])  # by source, in client order
            gains = np.array([g for _, _, g in entries])
            top = gains.max()
            if not is_splittable(top, self.config.gamma):
                if entries[0][1] == self.name:
                    leaves.append((self.order[entries[0][0]], node))
                continue
            s, splitter, _ = entries[int(np.argmax(ties_with(gains, top)))]
            self.node_gains[(tree, node)] = float(top)  # every client learns it (the best gains), for importances
            if splitter == self.name:
                wins.setdefault(self.order[s], []).append((node, *self._tied(self.order[s], node, top)))
        out = []
        for p in self.others:
            won = wins.get(p)
            out.append(None if not won else self.mailbox.send(
                "pivodl_split_won", [p], {"node": np.asarray([n for n, _, _ in won], dtype=np.int64),
                                          "records": [r for _, r, _ in won], "cuts": [c for _, _, c in won]},
                tree, depth))
        leaf = self._release([(node, *self.scored[(source, node)][2:4]) for source, node in leaves], depth)
        return (None, leaf, *out)

    def _tied(self, source: str, node: int, top: float) -> tuple[np.ndarray, np.ndarray]:
        """The records tied with the best gain ``top``, and the partition cuts tied with it: per group and
        missing direction the first (fewest categories), as ``(cuts, records + 2)`` rows of record codes,
        how many of the run, missing left (:meth:`~ray_vfl.pivodl.partition.PrefixCuts.codes`). Their sums
        are kept for :meth:`apply_chosen`."""
        GL, _, _, _, gain, cuts = self.scored[(source, node)]
        rows, sums = [], []
        for cut in cuts.values():
            for direction in (0, 1):
                tied = np.flatnonzero(ties_with(cut.gain[direction], top))
                if tied.size:
                    j = int(tied[0])
                    codes, take = cut.codes(j, len(GL))
                    rows.append(np.concatenate([codes.astype(np.int64), [take, 1 - direction]]))
                    sums.append((cut.gl[direction, j], cut.hl[direction, j]))
        self._cut_sums = getattr(self, "_cut_sums", {})
        self._cut_sums[(source, node)] = sums
        return (np.flatnonzero(ties_with(gain, top)).astype(np.int64),
                np.asarray(rows, dtype=np.int64).reshape(len(rows), len(GL) + 2))

    def apply_chosen(self, depth: int, chosen: list, children: list[tuple[int, int, int]], last: bool) -> tuple:
        """The split client learns which of its tied records the source chose; at the last level the two
        children are leaves, and it holds them: it alone knows their sums."""
        child = {parent: (left, right) for parent, left, right in children}
        leaves = []
        for msg in fetch(chosen):
            ctx = {"open_nodes": set(self.open_nodes),
                   "choices": {n: len(v[0]) + len(getattr(self, "_cut_sums", {}).get((s, n), []))
                               for (s, n), v in self.scored.items() if s == msg.sender}}
            pairs = self.mailbox.open(msg, "pivodl_chosen_record", ctx, self.others)
            for node, record in pairs.tolist():
                GL, HL, G, H, _, _ = self.scored[(msg.sender, node)]
                gl, hl = (GL[record], HL[record]) if record < len(GL) else self._cut_sums[(msg.sender, node)][record - len(GL)]
                if last:
                    left, right = child[node]
                    leaves += [(left, gl, hl), (right, G - gl, H - hl)]
        return None, self._release(leaves, depth)

    def _release(self, leaves: list[tuple[int, float, float]], depth: int) -> Any:
        """Leaf weights of the leaves this client holds, kept for prediction and released to every client
        (for their margins): exact without DP; under partial DP clipped to ``[-C, C]``, kept so, and
        released with Gaussian noise of standard deviation ``z * sensitivity``
        (:meth:`~ray_vfl.pivodl.config.PIVODLConfig.leaf_sensitivity`) drawn from this client's own
        OS-entropy generator.

        Why the kept weight is clipped too: the clients' margins move by the noisy weights, so every
        later tree's exact weights also correct that noise, and at small epsilon they reach hundreds
        (the noise saturates the margins, the hessians vanish). Prediction has no noise to correct:
        unclipped, those weights decide it (``benchmarks/RESULTS.md``, "Why epsilon 1 scored below epsilon 0.1")."""
        if not leaves:
            return None
        cfg = self.config
        tree = len(self.trees) - 1
        nodes = np.array([n for n, _, _ in leaves], dtype=np.int64)
        G = np.array([g for _, g, _ in leaves])
        H = np.array([h for _, _, h in leaves])
        kept = leaf_weights(G, H, cfg.reg_lambda, cfg.learning_rate)
        released = kept
        if cfg.dp:
            kept = np.clip(kept, -cfg.leaf_clip, cfg.leaf_clip)
            sigma = cfg.noise_multiplier * cfg.leaf_sensitivity(H)
            released = kept + self.noise.sample(len(kept), sigma)
        for node, w in zip(nodes.tolist(), kept.tolist()):
            self.held[(tree, node)] = w
        payload = {"node": nodes, "weight": released.astype(np.float64)}
        self._take_leaves(tree, self.name, nodes, payload["weight"])
        return self.mailbox.send("pivodl_leaf_weights", self.others, payload, tree, depth)

