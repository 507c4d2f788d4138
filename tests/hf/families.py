"""Model families of the live Hugging Face comparisons. Each family builds random configurations of one
transformers model class; the tests ask for a family by name, so BART and T5 join by adding an entry here (and the
shapes that exercise their switches), not by copying tests."""
import torch
import transformers


class Family:
    """One transformers model class with the random shapes the comparisons run; subclasses fill in the names."""
    name = ""
    model_class = None
    config_class = None
    special = {}
    shapes = {}

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


FAMILIES = {family.name: family for family in (Pegasus, Bart)}
