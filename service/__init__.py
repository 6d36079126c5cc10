"""ComputeQuote: estimate, plan and price large-language-model training runs."""

__version__ = "0.1.0"
