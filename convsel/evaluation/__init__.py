"""How far each policy's pick is from the fastest, per layer: fresh timings against what
every policy chooses. Above the policies (it asks each of them) and tuning (it measures)."""
