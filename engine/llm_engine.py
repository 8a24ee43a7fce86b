"""The synchronous engine core: hosted models, one shared KV pool, one scheduler, one step loop.

``step()`` schedules one iteration across all models, runs each model on its share, samples,
and returns the deltas it produced. On CUDA with ``async_scheduling`` it first launches the
next iteration, so the GPU computes step N+1 while the host turns step N's tokens into deltas
(see ``engine.worker.inflight_step``). Embedding models take no part in the KV pool or the
scheduler: one bounded batch of their requests runs before each step (``engine.embedder``). It is
not thread-safe; ``AsyncEngine`` and ``LLM`` drive it
from a single thread (``AsyncEngine`` under its lock).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.core.block_pool import BlockPool
from engine.core.cache_scope import cache_salt
from engine.core.embedding_queue import EmbeddingJob
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import ScheduledSeq, Scheduler, SchedulerOutput
from engine.core.sequence import Sequence, SequenceStatus
from engine.embedder import Embedder
from engine.errors import (
    EngineConfigError,
    InvalidRequestError,
    PromptTooLongError,
    UnknownModelError,
)
from engine.loading.hosted_model import HostedModel, load_hosted_models
from engine.loading.model_source import ModelSource
from engine.loading.source_opener import SourceOpener
from engine.sampling import GrammarCompiler, GrammarMatcher, Sampler
from engine.sequence_output import SequenceOutput
from engine.tuning import DEFAULT_TUNING, CudaTuning
from engine.worker.distributed import place
from engine.worker.inflight_step import InflightStep, SampledRow
from engine.worker.kv_cache import KVCache
from engine.worker.model_runner import ModelRunner
from engine.worker.pipeline_runner import PipelineRunner
from engine.worker.rank_group import RankGroup
from engine.worker.step_plan import to_plan

__all__ = ["LLMEngine"]

log = logging.getLogger(__name__)


class LLMEngine:
    def __init__(
        self,
        config: EngineConfig,
        data_dir: str | Path = ".",
        sources: Mapping[str, ModelSource] | None = None,
        *,
        skip_failed_models: bool = False,
        tuning: CudaTuning = DEFAULT_TUNING,
        source_opener: SourceOpener | None = None,
    ) -> None:
        """``tuning``: the CUDA path's fusions and launch shapes (``engine.tuning``); not a
        deployment setting, the defaults are the production values. ``source_opener``: how the
        ranks this engine spawns open ``sources`` themselves (needed for sealed ones:
        ``engine.loading.source_opener``)."""
        self.config = config
        self.device = torch.device(config.device)
        if config.num_threads is not None and self.device.type == "cpu":
            torch.set_num_threads(config.num_threads)
        self.ranks: RankGroup | None = None
        """The other tensor- and pipeline-parallel ranks; None on one rank."""
        if config.world_size > 1:
            self.ranks = RankGroup.start(config, data_dir, sources, source_opener)
            self.device = self.ranks.device  # rank 0's own device (``cuda:0`` for ``cuda``)
        elif place().world_size > 1:
            # Layers read the world size when built: this engine's would come out sharded.
            raise EngineConfigError("a tensor- or pipeline-parallel engine already runs in this process")
        try:
            self.models, self.failed_models = load_hosted_models(
                config, data_dir, sources, self.device, skip_failed=skip_failed_models
            )
            self._build(config, tuning)
        except BaseException:
            self.close()
            raise

    def _build(self, config: EngineConfig, tuning: CudaTuning) -> None:
        hosted = [m for m in self.models.values() if not m.is_embedding]
        if self.ranks is not None and len(hosted) < len(self.models):
            # The embedding path runs on this rank alone; sharded weights need every rank.
            raise EngineConfigError(
                "embedding models are not served with tensor_parallel_size or pipeline_parallel_size > 1"
            )
        block_bytes = KVCache.block_bytes_for(hosted or list(self.models.values()), config.block_size)
        # Only embedding models: nothing is ever cached, one block keeps the pool well-formed.
        num_blocks = KVCache.num_blocks_for(config, hosted, block_bytes, self.device) if hosted else 1
        if self.ranks is not None:  # every rank's pool has as many blocks as the smallest one's
            num_blocks = self.ranks.agree(list(self.models), num_blocks)
        self.kv_cache = KVCache(num_blocks, block_bytes, config.block_size, self.device)
        for model in hosted:
            self.kv_cache.bind(model)
        self.block_pool = BlockPool(self.kv_cache.num_blocks)
        self.kv_manager = KVCacheManager(
            self.block_pool, config.block_size, enable_prefix_caching=config.enable_prefix_caching
        )
        self.scheduler = Scheduler(
            self.kv_manager,
            [m.name for m in hosted],
            max_num_seqs=config.seq_limit,
            max_num_batched_tokens=config.token_budget,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
        )
        self.runners: dict[str, ModelRunner] = {
            name: ModelRunner(
                m,
                config.block_size,
                self.device,
                cuda_graphs=config.cuda_graphs and self.ranks is None,
                fused=self.ranks is None,
                max_num_seqs=config.seq_limit,
                tuning=tuning,
            )
            if config.pipeline_parallel_size == 1
            else PipelineRunner(m, config.block_size, self.device, place=place())
            for name, m in self.models.items()
            if not m.is_embedding
        }
        self.embedder = Embedder(
            [m for m in self.models.values() if m.is_embedding],
            self.device,
            max_batch_tokens=config.token_budget,
        )
        self._cache_scopes = {spec.name: spec.prefix_cache_scope for spec in config.models}
        self.sampler = Sampler(torch.Generator(self.device).manual_seed(config.seed))
        self._grammars: dict[str, GrammarCompiler] = {}
        """Per model, made at its first structured request."""
        self._requests: dict[str, list[Sequence]] = {}
        self._outputs: dict[int, SequenceOutput] = {}
        self._arrivals = 0
        self.num_steps = 0
        self.device_wait_s = 0.0
        """Host time spent waiting for sampled tokens (the rest of a step's wall time is host work)."""
        self.async_scheduling = config.async_scheduling and self.device.type == "cuda" and self.ranks is None
        self._inflight: InflightStep | None = None
        self._retired: set[int] = set()
        """Sequences that ended while the in-flight step computes a row for them."""

    def close(self) -> None:
        """Stop the other ranks (nothing to do on one rank)."""
        if self.ranks is not None:
            self.ranks.close()
            self.ranks = None

    def model(self, name: str) -> HostedModel:
        hosted = self.models.get(name)
        if hosted is None:
            raise UnknownModelError(f"model {name!r} is not hosted by this engine", param="model")
        return hosted

    def generative_model(self, name: str) -> HostedModel:
        hosted = self.model(name)
        if hosted.is_embedding:
            raise InvalidRequestError(
                f"model {name!r} is an embedding model: it serves /v1/embeddings only", param="model"
            )
        return hosted

    def prompt_token_ids(self, model: str, prompt: str | list[int]) -> list[int]:
        """Tokenize and validate a prompt; raises before anything is queued."""
        hosted = self.generative_model(model)
        ids = hosted.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids and isinstance(prompt, str):
            # OpenAI's empty prompt is its default, <|endoftext|>: the document boundary, which is
            # BOS here, or EOS for a model without one (Qwen).
            boundary = hosted.tokenizer.bos_token_id
            if boundary is None:
                boundary = hosted.tokenizer.eos_token_id
            if boundary is None and hosted.eos_token_ids:
                boundary = min(hosted.eos_token_ids)
            ids = [] if boundary is None else [boundary]
        if not ids:
            raise InvalidRequestError("prompt must not be empty", param="prompt")
        vocab = hosted.config.vocab_size
        if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", param="prompt")
        if len(ids) >= hosted.max_model_len:
            raise PromptTooLongError(
                f"prompt has {len(ids)} tokens; {model} allows at most {hosted.max_model_len - 1}",
                param="prompt",
            )
        capacity = self.block_pool.num_blocks * self.config.block_size
        if len(ids) + 1 > capacity:
            raise PromptTooLongError(
                f"prompt has {len(ids)} tokens; the KV pool holds at most {capacity - 1}", param="prompt"
            )
        return ids

    def add_request(
        self,
        request_id: str,
        model: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        tenant: str | None = None,
        subject: str | None = None,
        priority: int = 0,
    ) -> list[Sequence]:
        ids = self.prompt_token_ids(model, prompt)
        return self.add_tokenized(
            request_id, model, ids, params, tenant=tenant, subject=subject, priority=priority
        )

    def add_tokenized(
        self,
        request_id: str,
        model: str,
        ids: list[int],
        params: SamplingParams,
        *,
        tenant: str | None = None,
        subject: str | None = None,
        priority: int = 0,
    ) -> list[Sequence]:
        """``tenant`` and ``subject`` pick the prefix cache the request may share (``engine.core.cache_scope``)."""
        if request_id in self._requests:
            raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
        hosted = self.generative_model(model)
        vocab = hosted.config.vocab_size
        if any(token_id >= vocab for token_id, _ in params.logit_bias):
            raise InvalidRequestError(f"logit_bias token ids must be in [0, {vocab})", param="logit_bias")
        grammars = self._grammar_matchers(model, params)  # an invalid schema raises before queueing
        salt = cache_salt(self._cache_scopes[model], tenant, subject)
        self._arrivals += 1
        seqs = [
            Sequence(
                request_id,
                model,
                ids,
                params,
                index=i,
                cache_salt=salt,
                priority=priority,
                arrival=self._arrivals,
            )
            for i in range(params.n)
        ]
        for seq in seqs:
            self._outputs[seq.seq_id] = SequenceOutput(
                seq,
                hosted.tokenizer,
                eos_token_ids=hosted.eos_token_ids,
                max_model_len=hosted.max_model_len,
                device=self.device,
                grammar=grammars[seq.index] if grammars else None,
            )
            self.scheduler.add(seq)
        self._requests[request_id] = seqs
        return seqs

    def _grammar_matchers(self, model: str, params: SamplingParams) -> list[GrammarMatcher]:
        """One matcher per sequence of a structured request; none otherwise."""
        if params.structured is None:
            return []
        compiler = self._grammars.get(model)
        if compiler is None:
            hosted = self.models[model]
            compiler = GrammarCompiler(
                hosted.tokenizer.hf.to_str(), hosted.config.vocab_size, hosted.eos_token_ids
            )
            self._grammars[model] = compiler
        return [compiler.matcher(params.structured) for _ in range(params.n)]

    def embedding_model(self, name: str) -> HostedModel:
        hosted = self.model(name)
        if not hosted.is_embedding:
            raise InvalidRequestError(
                f"model {name!r} is not an embedding model: use chat or completions", param="model"
            )
        return hosted

    def embedding_token_ids(self, model: str, text: str | list[int]) -> list[int]:
        """Tokenize and validate one embedding input; raises before anything is queued."""
        return self.embedder.token_ids(self.embedding_model(model), text)

    def add_embedding(
        self, request_id: str, model: str, inputs: list[list[int]], *, dimensions: int | None = None
    ) -> EmbeddingJob:
        """Queue tokenized inputs (``embedding_token_ids``); the job comes back from
        ``take_embeddings`` once every input has its vector."""
        hosted = self.embedding_model(model)
        if request_id in self._requests or request_id in self.embedder:
            raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
        return self.embedder.add(request_id, hosted, inputs, dimensions)

    def take_embeddings(self) -> list[EmbeddingJob]:
        """Embedding jobs finished since the last call."""
        return self.embedder.take()

    def abort(self, request_id: str) -> list[tuple[str, StreamDelta]]:
        """End a request now, freeing its blocks; the closing "abort" delta of each live sequence."""
        self.embedder.abort(request_id)
        deltas = []
        for seq in self._requests.pop(request_id, []):
            if not seq.is_finished:
                self._retire(seq)
                self.scheduler.finish(seq, SequenceStatus.FINISHED_ABORTED)
                deltas.append((request_id, self._outputs[seq.seq_id].final(seq.status)))
            self._outputs.pop(seq.seq_id, None)
        return deltas

    def has_request(self, request_id: str) -> bool:
        return request_id in self._requests

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or self._inflight is not None or self.embedder.has_work

    @property
    def is_step_in_flight(self) -> bool:
        """A step was launched whose tokens have not been read yet (asynchronous scheduling)."""
        return self._inflight is not None

    def step(self) -> list[tuple[str, StreamDelta]]:
        self.embedder.run_batch()
        if not self.scheduler.has_work and self._inflight is None:
            return []
        cur = self._inflight or self._launch(self.scheduler.schedule())
        self._inflight = None
        self.scheduler.update(cur.out)
        ended = list(cur.out.finished)  # by the scheduler: outgrew the whole pool
        ended_next: list[Sequence] = []
        if self.async_scheduling and self._can_look_ahead(cur):
            self._hold_places(cur)
            nxt = self.scheduler.schedule()
            # Their closing deltas go out after this step's tokens, in this call.
            ended_next, nxt.finished = nxt.finished, []
            if nxt.scheduled:
                self._inflight = self._launch(nxt, prev=cur)
        deltas = [(s.request_id, self._outputs[s.seq_id].final(s.status)) for s in ended]
        closed: set[int] = set()
        for row, token_id in zip(cur.rows, cur.token_ids(), strict=True):
            seq = row.seq
            if seq.seq_id in self._retired:  # ended after this step was launched
                self._retired.discard(seq.seq_id)
                continue
            if row.is_held:
                seq.fill_place(token_id)
            else:
                seq.append_token(token_id)
            delta, status = self._outputs[seq.seq_id].on_token(token_id, row.logprobs)
            if status is not None:
                self._retire(seq)
                self.scheduler.finish(seq, status)
                closed.add(seq.seq_id)
            deltas.append((seq.request_id, delta))
        deltas.extend(
            (s.request_id, self._outputs[s.seq_id].final(s.status))
            for s in ended_next
            if s.seq_id not in closed
        )
        for request_id, delta in deltas:
            if delta.finish_reason is not None:  # only a sequence's last delta can end a request
                self._forget_if_done(request_id)
        self.device_wait_s += cur.wait_s
        self.num_steps += 1
        if self._inflight is None:
            self._prefetch_masks(cur)
        return deltas

    def _prefetch_masks(self, cur: InflightStep) -> None:
        """No step is in flight, so every running constrained row has consumed its last token:
        fill their next masks while the loop schedules and queues the next forward pass."""
        grammars = []
        for row in cur.rows:
            output = self._outputs.get(row.seq.seq_id)
            if output is not None and output.grammar is not None and not row.seq.is_finished:
                grammars.append(output.grammar)
        if grammars and len({g.vocab_size for g in grammars}) == 1:
            self.sampler.prefetch_masks(grammars, self.device)

    def _can_look_ahead(self, cur: InflightStep) -> bool:
        # Penalties read the output so far and logprobs are read back inside the sampler:
        # such rows need their tokens on the host before the next step.
        return not any(row.seq.needs_host_tokens for row in cur.rows)

    def _hold_places(self, cur: InflightStep) -> None:
        """Hold a place for each sampled token on its sequence, so the scheduler plans the next step."""
        outputs = self._outputs
        for row in cur.rows:
            seq = row.seq
            if seq.is_finished:
                continue
            if seq.num_output_tokens + 1 >= outputs[seq.seq_id].max_tokens:
                # Its last token: nothing to look ahead for. Its blocks go back now; the step
                # still in flight writes them before any later step can (one stream, in order).
                self.scheduler.finish(seq, SequenceStatus.FINISHED_LENGTH)
                continue
            row.is_held = True
            seq.hold_place()

    def _retire(self, seq: Sequence) -> None:
        if self._inflight is not None and seq.seq_id in self._inflight.row_of:
            self._retired.add(seq.seq_id)

    def _launch(self, out: SchedulerOutput, prev: InflightStep | None = None) -> InflightStep:
        """Queue one step's forward passes and sampling; nothing here waits for the device."""
        step = InflightStep(out)
        tokens: list[torch.Tensor] = []
        by_model = out.by_model()
        if self.ranks is not None and by_model:
            self.ranks.send([(model, to_plan(items)) for model, items in by_model.items()])
        for model, items in by_model.items():
            rows, sampled = self._run(model, items, prev)
            step.rows.extend(rows)
            if sampled is not None:
                tokens.append(sampled)
        if tokens:
            step.tokens = tokens[0] if len(tokens) == 1 else torch.cat(tokens)
        step.row_of = {row.seq.seq_id: i for i, row in enumerate(step.rows)}
        step.start_copy()
        return step

    def _run(
        self, model: str, items: list[ScheduledSeq], prev: InflightStep | None
    ) -> tuple[list[SampledRow], torch.Tensor | None]:
        # Decode rows whose input token is still on the device read it from the previous step.
        if prev is None:
            sources = [-1] * len(items)
        else:
            row_of = prev.row_of
            sources = [row_of[item.seq.seq_id] if item.reads_pending else -1 for item in items]
        pending = prev.tokens if prev is not None and any(s >= 0 for s in sources) else None
        if self.ranks is None:
            out = self.runners[model].execute(items, pending, sources)  # logits: [num sampling, vocab]
        else:
            with self.ranks.watch():
                out = self.runners[model].execute(items)
        seqs = [item.seq for item in items if item.is_sampling]
        if not seqs:
            return [], None
        if prev is not None:
            self._catch_up_grammars(seqs, prev)
        # Only penalties read the tokens so far; other rows skip copying them (and never see a
        # placeholder: a row with penalties always has its tokens on the host).
        rows = [self._outputs[s.seq_id].sampling_row() for s in seqs]
        result = self.sampler(out.logits, rows, out.argmax)
        return [SampledRow(s, lp) for s, lp in zip(seqs, result.logprobs, strict=True)], result.token_ids

    def _catch_up_grammars(self, seqs: list[Sequence], prev: InflightStep) -> None:
        """Constrained rows launched past their last token: their masks need it. Wait for the
        previous step's tokens now, while the forward pass just queued keeps the device busy."""
        outputs = self._outputs
        behind = [s for s in seqs if s.num_pending_tokens and outputs[s.seq_id].grammar is not None]
        if not behind:
            return
        tokens = prev.token_ids()
        for seq in behind:
            grammar = outputs[seq.seq_id].grammar
            assert grammar is not None
            grammar.advance_to(seq.num_output_tokens, tokens[prev.row_of[seq.seq_id]])

    def _forget_if_done(self, request_id: str) -> None:
        seqs = self._requests.get(request_id)
        if seqs is not None and all(s.is_finished for s in seqs):
            del self._requests[request_id]
            for s in seqs:
                self._outputs.pop(s.seq_id, None)

    def stats(self) -> dict[str, int | float]:
        kv = self.kv_manager
        out: dict[str, int | float] = {
            "blocks_total": self.block_pool.num_blocks,
            "blocks_free": self.block_pool.num_free_blocks,
            "blocks_cached": self.block_pool.num_cached_blocks,
            "block_bytes": self.kv_cache.block_bytes,
            "running": self.scheduler.num_running,
            "waiting": self.scheduler.num_waiting,
            "preemptions": self.scheduler.num_preemptions,
            "steps": self.num_steps,
            "device_wait_s": self.device_wait_s,
            "prefix_cache_hit_tokens": kv.num_cache_hit_tokens,
            "prefix_cache_hit_rate": kv.num_cache_hit_tokens / kv.num_cache_query_tokens
            if kv.num_cache_query_tokens
            else 0.0,
            "prefix_cache_query_tokens": kv.num_cache_query_tokens,
        }
        # Per model, flat so the stats stay one mapping of numbers on the wire.
        for model, (running, waiting) in self.scheduler.num_by_model().items():
            out[f"running:{model}"] = running
            out[f"waiting:{model}"] = waiting
        return out
