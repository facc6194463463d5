"""Training the reasoning LM: the policy, rationale SFT, GRPO with the paper's rewards and the
frozen reference LM."""
