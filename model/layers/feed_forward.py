"""Position-wise feed-forward ("dense") sub-layer of a Transformer-XL block.

Size glossary:
    B: batch size.
    T: segment length.
    D: model width (d_model).
    F: inner width (d_ffn).

Post-norm (default, as in Transformer-XL): `LN(x + FF(x))`.
Pre-norm: `x + FF(LN(x))`.
with `FF(x) = Dropout(Dense_D(Dropout(act(Dense_F(x)))))`.
"""

import keras

from model.layers.dropout import FastDropout
from model.layers.initializers import clone_initializer
from model.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="par")
class PositionwiseFeedForward(keras.layers.Layer):
    """Two dense layers with dropout, residual and layer norm.

    Args:
        d_model: int, model width D.
        d_ffn: int, inner width F.
        dropout: float, dropout after the activation and after the output
            (`FastDropout`: the rate is quantised to a multiple of 1/256).
        pre_norm: bool, pre-norm instead of post-norm.
        activation: activation of the inner layer (name or Keras activation).
        layer_norm_epsilon: float, epsilon of the layer norm.
        kernel_initializer: initializer of both kernels (default normal with
            stddev 0.02, as in Transformer-XL); biases start at zero.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).
    """

    def __init__(
        self,
        d_model,
        d_ffn,
        dropout=0.0,
        pre_norm=False,
        activation="relu",
        layer_norm_epsilon=1e-5,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for field, value in (("d_model", d_model), ("d_ffn", d_ffn)):
            if int(value) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {value}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = int(d_model)
        self.d_ffn = int(d_ffn)
        self.dropout = float(dropout)
        self.pre_norm = bool(pre_norm)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

        self.inner_dense = keras.layers.Dense(
            self.d_ffn,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer, 0),
            dtype=self.dtype_policy,
            name="inner_dense",
        )  # [B, T, D] -> [B, T, F]
        self.output_dense = keras.layers.Dense(
            self.d_model,
            kernel_initializer=clone_initializer(self.kernel_initializer, 1),
            dtype=self.dtype_policy,
            name="output_dense",
        )  # [B, T, F] -> [B, T, D]
        self.inner_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="inner_dropout"
        )
        self.output_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="output_dropout"
        )
        self.layer_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] != self.d_model:
            raise ValueError(
                f"{self.name}: input width {input_shape[-1]} != d_model {self.d_model}; "
                "pass inputs of shape [B, T, d_model]"
            )
        self.layer_norm.build(input_shape)
        self.inner_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.d_ffn,))
        super().build(input_shape)

    @property
    def dropout_layers(self):
        """The FastDropout layers a training call draws from
        (`model.layers.dropout.fixed_seeds`)."""
        return [self.inner_dropout, self.output_dropout]

    def call(self, x, training=False):
        """Applies the feed-forward network, the residual and the norm.

        Args:
            x: [B, T, D].
            training: bool, enables dropout.

        Returns:
            [B, T, D] in the compute dtype.
        """
        hidden = self.layer_norm(x) if self.pre_norm else x
        hidden = self.inner_dense(hidden)  # [B, T, F]
        hidden = self.inner_dropout(hidden, training=training)
        hidden = self.output_dense(hidden)  # [B, T, D]
        hidden = self.output_dropout(hidden, training=training)
        if self.pre_norm:
            return x + hidden
        return self.layer_norm(x + hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "d_ffn": self.d_ffn,
                "dropout": self.dropout,
                "pre_norm": self.pre_norm,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
