"""Model families of the live Hugging Face comparisons. Each family builds random configurations of one
transformers model class; the tests ask for a family by name, so a family joins by adding an entry here (and the shapes
that exercise its switches), not by copying tests."""
import torch
import transformers


class Family:
    """One transformers model class with the random shapes the comparisons run; subclasses fill in the names."""
    name = ""
    model_class = None
    config_class = None
    special = {}
    shapes = {}
    generate_seeds = (21,)  # the seeds of random_model_with_likely_eos that test_generate runs

    @classmethod
    def pad(cls):
        return cls.special["pad_token_id"]

    @classmethod
    def eos(cls):
        return cls.special["eos_token_id"]

    @classmethod
    def config(cls, shape="tiny", **overrides):
        kwargs = dict(cls.shapes[shape], dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                      **cls.special)
        kwargs.update(overrides)
        return cls.config_class(**kwargs)

    @classmethod
    def random_model(cls, seed, shape="tiny", **overrides):
        """A randomly initialised model (HF's own _init_weights under torch.manual_seed(seed))."""
        torch.manual_seed(seed)
        model = cls.model_class(cls.config(shape, **overrides))
        return model.eval()

    @classmethod
    def random_model_with_likely_eos(cls, seed):
        """A random model whose eos is likely, so that hypotheses finish at many different lengths and beam search's
        finishing rules (early_stopping, length_penalty, min_length) decide the outcome: eos's final_logits_bias is
        raised."""
        model = cls.random_model(seed=seed, shape="tiny", vocab_size=61)
        with torch.no_grad():
            model.final_logits_bias[0, cls.eos()] = 1.5
        return model


# Shapes for the forward/gradient comparison: odd head counts, gelu/relu, scale_embedding on and off, uneven layer
# counts. Dropouts are 0 so that both sides compute the same deterministic function.
SHAPES = {
    "tiny": dict(vocab_size=103, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, activation_function="relu",
                 scale_embedding=True, max_position_embeddings=64),
    "odd_heads_gelu": dict(vocab_size=97, d_model=30, encoder_layers=3, decoder_layers=1,
                           encoder_attention_heads=3, decoder_attention_heads=5, encoder_ffn_dim=37,
                           decoder_ffn_dim=41, activation_function="gelu", scale_embedding=False,
                           max_position_embeddings=40),
    "deep_decoder": dict(vocab_size=211, d_model=24, encoder_layers=1, decoder_layers=3,
                         encoder_attention_heads=2, decoder_attention_heads=6, encoder_ffn_dim=16,
                         decoder_ffn_dim=72, activation_function="relu", scale_embedding=True,
                         max_position_embeddings=48),
}


class Pegasus(Family):
    """Pre-LayerNorm, sinusoidal positions, final LayerNorms."""
    name = "pegasus"
    model_class = transformers.PegasusForConditionalGeneration
    config_class = transformers.PegasusConfig
    # pad 0 (also the decoder start token), eos 1, as in google/pegasus-*.
    special = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)
    shapes = SHAPES


class Bart(Family):
    """Post-LayerNorm, learned positions (offset 2), layernorm_embedding, no final LayerNorms."""
    name = "bart"
    model_class = transformers.BartForConditionalGeneration
    config_class = transformers.BartConfig
    # <s> 0, <pad> 1, </s> 2 (also the decoder start token), as in facebook/bart-*.
    special = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
    shapes = SHAPES


# T5's shapes: d_kv apart from d_model / heads, the relative-position buckets and distance, one head count for both
# stacks.
T5_SHAPES = {
    "tiny": dict(vocab_size=103, d_model=32, d_kv=6, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                 relative_attention_num_buckets=8, relative_attention_max_distance=20),
    "odd_heads_gelu": dict(vocab_size=97, d_model=30, d_kv=7, d_ff=37, num_layers=3, num_decoder_layers=1,
                           num_heads=3, relative_attention_num_buckets=6, relative_attention_max_distance=10),
    "deep_decoder": dict(vocab_size=211, d_model=24, d_kv=8, d_ff=72, num_layers=1, num_decoder_layers=3,
                         num_heads=6, relative_attention_num_buckets=16, relative_attention_max_distance=32),
}


class T5(Family):
    """T5 v1.0 (t5-small/base/large): RMSNorm, no biases, relative position bias, unscaled scores, relu, tied head
    rescaled by d_model ** -0.5."""
    name = "t5"
    model_class = transformers.T5ForConditionalGeneration
    config_class = transformers.T5Config
    # pad 0 (also the decoder start token), eos 1, as in t5-*.
    special = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    shapes = T5_SHAPES
    switches = dict(feed_forward_proj="relu", tie_word_embeddings=True)
    generate_seeds = (5, 21)

    @classmethod
    def config(cls, shape="tiny", **overrides):
        kwargs = dict(cls.shapes[shape], dropout_rate=0.0, **cls.switches, **cls.special)
        kwargs.update(overrides)
        return cls.config_class(**kwargs)

    @classmethod
    def random_model_with_likely_eos(cls, seed):
        """T5 has no final_logits_bias to raise. A vocabulary of 17 (the least that 8 beams' 16 candidates allow) and
        an LM head scaled by 0.1 (flatter distributions) make eos likely: over every third beam case of the test, seed
        5 ends 70 of 72
        rows (v1.1: 66) in eos at 4 to 5 different lengths, seed 21 ends 10 (v1.1: 39), so both are run."""
        model = cls.random_model(seed=seed, shape="tiny", vocab_size=17)
        with torch.no_grad():
            model.lm_head.weight.mul_(0.1)
        return model


class T5v11(T5):
    """T5 v1.1 / FLAN-T5: gated-gelu feed-forward (wi_0, wi_1), untied head without the rescale."""
    name = "t5_v1_1"
    switches = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)


class MT5(T5v11):
    """mT5: T5 v1.1's model under model_type "mt5" (MT5ForConditionalGeneration)."""
    name = "mt5"
    model_class = transformers.MT5ForConditionalGeneration
    config_class = transformers.MT5Config


# PEGASUS-X's shapes: SHAPES with blocks of a few positions (the tests' sources are not multiples of them), a few
# global tokens, staggered blocks on and off.
PEGASUS_X_SHAPES = {
    "tiny": dict(SHAPES["tiny"], block_size=4, num_global_tokens=3, stagger_local_blocks=True),
    "odd_heads_gelu": dict(SHAPES["odd_heads_gelu"], block_size=6, num_global_tokens=2, stagger_local_blocks=True),
    "deep_decoder": dict(SHAPES["deep_decoder"], block_size=5, num_global_tokens=4, stagger_local_blocks=False),
}


class PegasusX(Family):
    """PEGASUS-X: PEGASUS with block-local encoder attention plus global tokens, staggered blocks, positions computed
    on the fly, no attention biases, no final_logits_bias."""
    name = "pegasus_x"
    model_class = transformers.PegasusXForConditionalGeneration
    config_class = transformers.PegasusXConfig
    special = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)
    shapes = PEGASUS_X_SHAPES

    @classmethod
    def random_model_with_likely_eos(cls, seed):
        """No final_logits_bias to raise: the tied embedding's eos row is scaled up instead (the head reads it)."""
        model = cls.random_model(seed=seed, shape="tiny", vocab_size=61)
        with torch.no_grad():
            model.model.shared.weight[cls.eos()].mul_(3.0)
        return model


# LongT5's shapes: T5_SHAPES with a local radius of a few positions (block_len = local_radius + 1) and small global
# blocks, so that the tests' sources span several blocks and end inside one.
LONG_T5_SHAPES = {
    "tiny": dict(T5_SHAPES["tiny"], local_radius=2, global_block_size=4),
    "odd_heads_gelu": dict(T5_SHAPES["odd_heads_gelu"], local_radius=4, global_block_size=3),
    "deep_decoder": dict(T5_SHAPES["deep_decoder"], local_radius=1, global_block_size=2),
}


class LongT5Local(T5):
    """LongT5 with local attention (google/long-t5-local-*): T5 v1.1's layers, encoder windows of local_radius."""
    name = "longt5_local"
    model_class = transformers.LongT5ForConditionalGeneration
    config_class = transformers.LongT5Config
    shapes = LONG_T5_SHAPES
    switches = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, encoder_attention_type="local")


class LongT5TGlobal(LongT5Local):
    """LongT5 with transient-global attention (google/long-t5-tglobal-*): local windows plus global block sums."""
    name = "longt5_tglobal"
    switches = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                    encoder_attention_type="transient-global")


FAMILIES = {family.name: family
            for family in (Pegasus, Bart, T5, T5v11, MT5, PegasusX, LongT5Local, LongT5TGlobal)}
